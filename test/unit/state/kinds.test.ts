/**
 * Kinds in the mesh file (src/state/source.ts): a kind its API group does not have is refused at
 * the `kind:` line with kubectl's words and a hint; groups this project does not know are not
 * checked; a workload controller whose Pods are missing is only warned about.
 */
import { describe, expect, test } from 'vitest';
import { ConfigError } from '../../../src/util/errors.ts';
import { readObjects } from '../../../src/state/source.ts';

const one = (apiVersion: string, kind: string) => `apiVersion: ${apiVersion}\nkind: ${kind}\nmetadata: { name: x, namespace: demo }\n`;

function refusal(text: string): ConfigError {
  try {
    readObjects(text, 'mesh.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('accepted');
}

describe('unknown kinds', () => {
  test.each([
    ['v1', 'Servce', 'no matches for kind "Servce" in version "v1" (did you mean Service?)'],
    ['v1', 'pod', 'no matches for kind "pod" in version "v1" (did you mean Pod?)'],
    ['v1', 'Deployment', 'no matches for kind "Deployment" in version "v1" (Deployment is `apiVersion: apps/v1`)'],
    ['apps/v1', 'Deploymnet', 'no matches for kind "Deploymnet" in version "apps/v1" (did you mean Deployment?)'],
    ['security.istio.io/v1', 'AuthorizationPolcy', 'no matches for kind "AuthorizationPolcy" in version "security.istio.io/v1" (did you mean AuthorizationPolicy?)'],
    ['v1', 'HTTPRoute', 'no matches for kind "HTTPRoute" in version "v1" (HTTPRoute is `apiVersion: gateway.networking.k8s.io/v1`)'],
    ['networking.istio.io/v1', 'AuthorizationPolicy', 'no matches for kind "AuthorizationPolicy" in version "networking.istio.io/v1" (AuthorizationPolicy is `apiVersion: security.istio.io/v1`)'],
  ])('%s %s is refused at its kind line', (apiVersion, kind, message) => {
    const err = refusal(`# comment\n${one(apiVersion, kind)}`);
    expect(err.message).toBe(message);
    expect(err.location).toMatchObject({ file: 'mesh.yaml', line: 3, document: 0, object: `${kind}/demo/x`, field: 'kind' });
  });

  test('far from every kind of the group: the group’s kinds are listed', () => {
    expect(refusal(one('v1', 'Frobnicator')).message).toMatch(/^no matches for kind "Frobnicator" in version "v1" \(known kinds: .*\bService\b/);
  });

  test('inside a List, the item’s kind line is named', () => {
    const err = refusal('apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pdo\n  metadata: { name: p }\n');
    expect(err.location).toMatchObject({ line: 5, field: 'items[0].kind' });
  });

  test('known kinds, and kinds of groups not checked here, are read (Gateway API: the routing engine warns instead)', () => {
    const text = [one('v1', 'Service'), one('apps/v1', 'StatefulSet'), one('example.com/v1', 'Widget'), one('storage.k8s.io/v1', 'Anything'), one('networking.istio.io/v1', 'Gateway'), one('gateway.networking.k8s.io/v1', 'HttpRoute')].join('---\n');
    expect(readObjects(text, 'mesh.yaml').map((o) => o.kind)).toEqual(['Service', 'StatefulSet', 'Widget', 'Anything', 'Gateway', 'HttpRoute']);
  });
});
