/**
 * Property tests of the three peer-metadata decoders (pitfalls H5): any input gives a clean result,
 * never a throw, quickly and in bounded memory; and encode → decode is the identity.
 */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { parseBaggage } from '../../../src/peer/baggage-parse.ts';
import type { PeerInfo } from '../../../src/peer/peer-info.ts';
import { PeerExchangeDecoder, encodePeerExchange } from '../../../src/peer/peer-exchange.ts';
import type { PeerExchangeState } from '../../../src/peer/peer-exchange.ts';
import { decodePeerMetadata, encodePeerMetadata } from '../../../src/peer/peer-metadata-header.ts';
import { ISTIO_114_HEADER, ISTIO_124_EXCHANGE_FRAME_HEX, ISTIO_124_HEADER } from './fixtures.ts';

const RUNS = 500;
/** Per-call ceiling: generous for slow CI, far below what a quadratic path on 64 KiB would take. */
const MAX_MS = 250;

function timed<T>(fn: () => T): T {
  const start = performance.now();
  const result = fn();
  expect(performance.now() - start).toBeLessThan(MAX_MS);
  return result;
}

const PEER_FIELDS = [
  'name',
  'namespace',
  'cluster',
  'workload',
  'service',
  'revision',
  'app',
  'version',
  'identity',
  'region',
  'availabilityZone',
] as const;

function expectPeerShape(peer: PeerInfo): void {
  for (const field of [...PEER_FIELDS, 'type'] as const) expect(typeof peer[field]).toBe('string');
  expect(['', 'pod', 'deployment', 'job', 'cronjob']).toContain(peer.type);
  for (const value of Object.values(peer.labels)) expect(typeof value).toBe('string');
}

/** Any well-formed string (protobuf strings are UTF-8, so lone surrogates cannot round-trip). */
const text = fc.string({ unit: 'binary', maxLength: 40 });

const peerArb: fc.Arbitrary<PeerInfo> = fc
  .record({
    name: text,
    namespace: text,
    cluster: text,
    workload: text,
    type: fc.constantFrom('', 'pod', 'deployment', 'job', 'cronjob'),
    service: text,
    revision: text,
    app: text,
    version: text,
    identity: text,
    region: text,
    availabilityZone: text,
  })
  .map((p) => ({ ...p, labels: {} }));

/** What decoding the encoding of `peer` must give (type survives only with OWNER's `/` layout intact). */
function expectedRoundTrip(peer: PeerInfo): PeerInfo {
  const labels: Record<string, string> = {};
  if (peer.app !== '') labels.app = peer.app;
  if (peer.service !== '') labels['service.istio.io/canonical-name'] = peer.service;
  if (peer.revision !== '') labels['service.istio.io/canonical-revision'] = peer.revision;
  if (peer.version !== '') labels.version = peer.version;
  return { ...peer, type: peer.workload.includes('/') ? expect.any(String) : peer.type, labels } as PeerInfo;
}

/** Valid bytes with random damage: flips, truncation, insertion. */
function damaged(bytes: Buffer): fc.Arbitrary<Buffer> {
  return fc
    .tuple(fc.nat({ max: bytes.length }), fc.nat({ max: bytes.length }), fc.uint8Array({ maxLength: 8 }), fc.nat(255))
    .map(([cut, at, insert, flip]) => {
      const copy = Buffer.from(bytes);
      if (at < copy.length) copy[at] = copy[at]! ^ (flip || 1);
      return Buffer.concat([copy.subarray(0, at), Buffer.from(insert), copy.subarray(at, Math.max(at, cut))]);
    });
}

describe('x-envoy-peer-metadata decoder', () => {
  test('any string: a result, never a throw', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (value) => {
        const result = timed(() => decodePeerMetadata(value));
        if (result.ok) expectPeerShape(result.peer);
        else expect(typeof result.error).toBe('string');
      }),
      { numRuns: RUNS },
    );
  });

  test('base64 of any bytes, and of damaged real headers', () => {
    const real = [ISTIO_124_HEADER, ISTIO_114_HEADER].map((h) => Buffer.from(h, 'base64'));
    const bytes = fc.oneof(fc.uint8Array({ maxLength: 600 }).map((b) => Buffer.from(b)), ...real.map(damaged));
    fc.assert(
      fc.property(bytes, fc.boolean(), (b, pad) => {
        const value = b.toString('base64');
        const result = timed(() => decodePeerMetadata(pad ? value : value.replace(/=+$/, '')));
        if (result.ok) expectPeerShape(result.peer);
      }),
      { numRuns: RUNS },
    );
  });

  test('deeply nested Struct/List values are refused, not a stack overflow', () => {
    // Value{list_value{values: Value{list_value{…}}}} nested far beyond the recursion limit.
    let inner = Buffer.alloc(0);
    for (let depth = 0; depth < 1000; depth++) {
      const list = Buffer.concat([Buffer.from([0x0a]), varint(inner.length), inner]); // ListValue.values
      inner = Buffer.concat([Buffer.from([0x32]), varint(list.length), list]); // Value.list_value (6)
    }
    const entry = Buffer.concat([Buffer.from([0x0a, 0x01, 0x41, 0x12]), varint(inner.length), inner]);
    const struct = Buffer.concat([Buffer.from([0x0a]), varint(entry.length), entry]);
    const value = struct.toString('base64');
    expect(value.length).toBeLessThan(64 * 1024); // refused by the parser, not by the size check
    const result = timed(() => decodePeerMetadata(value));
    expect(result).toMatchObject({ ok: false, error: expect.stringContaining('recursion') });
  });

  test('encode → decode is the identity on every field', () => {
    fc.assert(
      fc.property(peerArb, (peer) => {
        const result = decodePeerMetadata(encodePeerMetadata(peer));
        expect(result).toEqual({ ok: true, peer: expectedRoundTrip(peer) });
      }),
      { numRuns: RUNS },
    );
  });
});

describe('baggage parser', () => {
  const member = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 30 }),
    fc.tuple(
      fc.constantFrom('k8s.namespace.name', 'k8s.cluster.name', 'k8s.pod.name', 'service.name', 'app.version', 'junk', ''),
      fc.constantFrom('=', ' = ', '', '=='),
      fc.string({ unit: 'binary', maxLength: 20 }),
      fc.constantFrom('', ';p=1', ';', '%2C', '\u00ff'),
    ).map((parts) => parts.join('')),
  );
  const header = fc.array(member, { maxLength: 250 }).map((m) => m.join(','));

  test('any header value(s): a frozen peer, never a throw', () => {
    fc.assert(
      fc.property(fc.oneof(header, fc.array(header, { maxLength: 4 })), (value) => {
        const peer = timed(() => parseBaggage(value));
        if (Array.isArray(value) && value.length === 0) {
          expect(peer).toBeUndefined();
          return;
        }
        expect(peer).toBeDefined();
        expectPeerShape(peer!);
        expect(Object.isFrozen(peer)).toBe(true);
        expect(peer!.identity).toBe('');
      }),
      { numRuns: RUNS },
    );
  });

  test('large and latin1 inputs stay fast', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', minLength: 8000, maxLength: 70_000 }), (value) => {
        expectPeerShape(timed(() => parseBaggage(value))!);
      }),
      { numRuns: 30 },
    );
  });

  test('a known key keeps a clean value whatever noise surrounds it', () => {
    const noise = fc.string({ maxLength: 40 }).filter((s) => !s.includes('k8s.namespace.name'));
    const clean = fc.stringMatching(/^[a-z0-9][a-z0-9.-]{0,30}$/);
    fc.assert(
      fc.property(noise, clean, noise, (before, ns, after) => {
        const value = `${before},k8s.namespace.name=${ns},${after}`;
        expect(parseBaggage(value)!.namespace).toBe(ns);
      }),
      { numRuns: RUNS },
    );
  });
});

describe('istio-peer-exchange decoder', () => {
  const FRAME = Buffer.from(ISTIO_124_EXCHANGE_FRAME_HEX, 'hex');

  /** Feed `bytes` cut at `cuts`; every state until the terminal one must be need-more. */
  function feed(bytes: Buffer, cuts: number[]): { final: PeerExchangeState; states: PeerExchangeState[]; rest: Buffer } {
    const decoder = new PeerExchangeDecoder();
    const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
    const states: PeerExchangeState[] = [];
    const rests: Buffer[] = [];
    let from = 0;
    for (const to of [...points, bytes.length]) {
      const state = decoder.push(bytes.subarray(from, to));
      states.push(state);
      if (state.state !== 'need-more') rests.push(state.rest);
      from = to;
    }
    const final = states.find((s) => s.state !== 'need-more') ?? decoder.end();
    if (final.state !== 'need-more' && rests.length === 0) rests.push(final.rest);
    return { final, states, rest: Buffer.concat(rests) };
  }

  const input = fc.oneof(
    fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
    fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.concat([FRAME.subarray(0, 4), Buffer.from(b)])),
    damaged(FRAME),
    fc.uint8Array({ maxLength: 50 }).map((b) => Buffer.concat([FRAME, Buffer.from(b)])),
  );

  test('any bytes in any chunking: need-more then one terminal state, never a throw', () => {
    fc.assert(
      fc.property(input, fc.array(fc.nat(), { maxLength: 6 }), (bytes, cuts) => {
        const { final, states } = timed(() => feed(bytes, cuts));
        const firstTerminal = states.findIndex((s) => s.state !== 'need-more');
        if (firstTerminal !== -1) {
          for (const s of states.slice(firstTerminal)) expect(s.state).toBe(final.state);
        }
        expect(['done', 'error']).toContain(final.state);
        if (final.state === 'done' && final.peer) expectPeerShape(final.peer);
      }),
      { numRuns: RUNS },
    );
  });

  test('chunking never changes the outcome, and no byte is lost or duplicated', () => {
    fc.assert(
      fc.property(input, fc.array(fc.nat(), { maxLength: 6 }), (bytes, cuts) => {
        const whole = feed(bytes, []);
        const split = feed(bytes, cuts);
        const summary = (s: PeerExchangeState) =>
          s.state === 'done' ? { state: s.state, peer: s.peer, nodeId: s.nodeId } : s.state === 'error' ? { state: s.state, kind: s.kind } : s;
        expect(summary(split.final)).toEqual(summary(whole.final));
        if (split.final.state !== 'error' || split.final.kind !== 'truncated') {
          expect(split.rest).toEqual(whole.rest);
        }
        // What the caller gets back is a suffix of the input.
        expect(bytes.subarray(bytes.length - split.rest.length)).toEqual(split.rest);
      }),
      { numRuns: RUNS },
    );
  });

  test('any declared length over the limit fails on the header alone', () => {
    fc.assert(
      fc.property(fc.integer({ min: 64 * 1024 + 1, max: 0xffffffff }), (length) => {
        const head = Buffer.alloc(8);
        head.writeUInt32BE(0x3d230467, 0);
        head.writeUInt32BE(length, 4);
        const state = new PeerExchangeDecoder().push(head);
        expect(state).toMatchObject({ state: 'error', kind: 'too-large' });
      }),
      { numRuns: 200 },
    );
  });

  test('encode → decode is the identity, with trailing data intact', () => {
    fc.assert(
      fc.property(peerArb, fc.string({ unit: 'binary', maxLength: 60 }), fc.uint8Array({ maxLength: 20 }), (peer, id, tail) => {
        const frame = encodePeerExchange(peer, id);
        const state = new PeerExchangeDecoder().push(Buffer.concat([frame, tail]));
        expect(state).toEqual({ state: 'done', peer: expectedRoundTrip(peer), nodeId: id, rest: Buffer.from(tail) });
      }),
      { numRuns: RUNS },
    );
  });
});

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.from(out);
}
