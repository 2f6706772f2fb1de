import { expect, test } from 'vitest';
import { parseSpiffeId } from '../../../src/identity/spiffe.ts';
import { refuseDownstreamPeer } from '../../../src/listener/peer-policy.ts';
import { DEFAULT_MESH_CONFIG } from '../../../src/state/mesh-config.ts';

const mesh = { ...DEFAULT_MESH_CONFIG, trustDomain: 'cluster.local', trustDomainAliases: ['old.local'] };

test.each([
  ['spiffe://cluster.local/ns/a/sa/b', undefined],
  ['spiffe://old.local/ns/a/sa/b', undefined],
  ['spiffe://evil.local/ns/a/sa/b', /trust domain "evil\.local" is neither "cluster\.local" nor one of trustDomainAliases/],
])('peer %s', (uri, expected) => {
  const r = refuseDownstreamPeer(parseSpiffeId(uri), mesh);
  if (expected === undefined) expect(r).toBeUndefined();
  else expect(r).toMatch(expected);
});

test('a certificate without a SPIFFE identity is refused', () => {
  expect(refuseDownstreamPeer(undefined, mesh)).toMatch(/no SPIFFE identity/);
});

test('without aliases only the mesh trust domain passes', () => {
  expect(refuseDownstreamPeer(parseSpiffeId('spiffe://old.local/ns/a/sa/b'), { ...mesh, trustDomainAliases: [] })).toBeDefined();
});
