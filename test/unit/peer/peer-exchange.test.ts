import { create, toBinary } from '@bufbuild/protobuf';
import { AnySchema, StructSchema, ValueSchema } from '@bufbuild/protobuf/wkt';
import { describe, expect, test } from 'vitest';
import {
  MAX_PEER_EXCHANGE_PAYLOAD,
  PEER_EXCHANGE_MAGIC,
  PeerExchangeDecoder,
  encodePeerExchange,
} from '../../../src/peer/peer-exchange.ts';
import type { PeerExchangeState } from '../../../src/peer/peer-exchange.ts';
import { EXCHANGE_NODE_ID, ISTIO_124_EXCHANGE_FRAME_HEX, ISTIO_124_PEER } from './fixtures.ts';

const FRAME = Buffer.from(ISTIO_124_EXCHANGE_FRAME_HEX, 'hex');

function header(length: number, magic = PEER_EXCHANGE_MAGIC): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32BE(magic, 0);
  b.writeUInt32BE(length, 4);
  return b;
}

function frameOf(payload: Uint8Array): Buffer {
  return Buffer.concat([header(payload.length), payload]);
}

function anyBytes(typeUrl: string, value: Uint8Array): Uint8Array {
  return toBinary(AnySchema, create(AnySchema, { typeUrl, value }));
}

function expectDone(state: PeerExchangeState): Extract<PeerExchangeState, { state: 'done' }> {
  if (state.state !== 'done') throw new Error(`expected done, got ${JSON.stringify(state)}`);
  return state;
}

function expectError(state: PeerExchangeState): Extract<PeerExchangeState, { state: 'error' }> {
  if (state.state !== 'error') throw new Error(`expected error, got ${state.state}`);
  return state;
}

describe('encode', () => {
  test('is byte-identical to the frame built with C++ protobuf (Envoy’s library)', () => {
    expect(encodePeerExchange(ISTIO_124_PEER, EXCHANGE_NODE_ID).toString('hex')).toBe(ISTIO_124_EXCHANGE_FRAME_HEX);
  });

  test('magic and big-endian length', () => {
    const frame = encodePeerExchange(ISTIO_124_PEER, 'id');
    expect(frame.subarray(0, 4).toString('hex')).toBe('3d230467');
    expect(frame.readUInt32BE(4)).toBe(frame.length - 8);
  });

  test('an empty node id is left out', () => {
    const done = expectDone(new PeerExchangeDecoder().push(encodePeerExchange(ISTIO_124_PEER, '')));
    expect(done.nodeId).toBe('');
    expect(done.peer).toEqual(ISTIO_124_PEER);
  });
});

describe('decode', () => {
  test('the C++-built frame followed by application data', () => {
    const done = expectDone(new PeerExchangeDecoder().push(Buffer.concat([FRAME, Buffer.from('world')])));
    expect(done.peer).toEqual(ISTIO_124_PEER);
    expect(done.nodeId).toBe(EXCHANGE_NODE_ID);
    expect(done.rest.toString()).toBe('world');
  });

  test('one byte at a time: need-more until the last frame byte', () => {
    const decoder = new PeerExchangeDecoder();
    for (let i = 0; i < FRAME.length - 1; i++) {
      expect(decoder.push(FRAME.subarray(i, i + 1)).state).toBe('need-more');
    }
    const done = expectDone(decoder.push(FRAME.subarray(FRAME.length - 1)));
    expect(done.peer?.workload).toBe('productpage-v1');
    expect(done.rest.length).toBe(0);
  });

  test('after done, further chunks pass through as rest', () => {
    const decoder = new PeerExchangeDecoder();
    expectDone(decoder.push(FRAME));
    const next = expectDone(decoder.push(Buffer.from('more')));
    expect(next.rest.toString()).toBe('more');
    expect(next.nodeId).toBe(EXCHANGE_NODE_ID);
  });

  test('bad magic: error at once, every byte handed back for use as application data', () => {
    const decoder = new PeerExchangeDecoder();
    const error = expectError(decoder.push(Buffer.from('GET / HTTP/1.1\r\n')));
    expect(error.kind).toBe('bad-magic');
    expect(error.rest.toString()).toBe('GET / HTTP/1.1\r\n');
    // Later bytes pass through too.
    expect(expectError(decoder.push(Buffer.from('Host: x'))).rest.toString()).toBe('Host: x');
  });

  test('bad magic is found before 8 bytes (a short server-first greeting is not held back)', () => {
    const decoder = new PeerExchangeDecoder();
    expect(decoder.push(Buffer.from([0x3d, 0x23])).state).toBe('need-more');
    const error = expectError(decoder.push(Buffer.from('+OK')));
    expect(error.kind).toBe('bad-magic');
    expect(error.rest).toEqual(Buffer.from([0x3d, 0x23, ...Buffer.from('+OK')]));
  });

  test('a declared length over the limit fails after the 8 header bytes, without buffering it', () => {
    const before = process.memoryUsage().arrayBuffers;
    const decoder = new PeerExchangeDecoder();
    const error = expectError(decoder.push(Buffer.concat([header(0xffffffff), Buffer.from('xy')])));
    expect(error.kind).toBe('too-large');
    expect(error.rest.toString()).toBe('xy');
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(16 * 1024 * 1024);
    expect(expectError(new PeerExchangeDecoder().push(header(MAX_PEER_EXCHANGE_PAYLOAD + 1))).kind).toBe('too-large');
  });

  test('maxPayloadBytes option', () => {
    expect(expectError(new PeerExchangeDecoder({ maxPayloadBytes: 100 }).push(FRAME)).kind).toBe('too-large');
    expect(new PeerExchangeDecoder({ maxPayloadBytes: FRAME.length - 8 }).push(FRAME).state).toBe('done');
  });

  test('a length at the limit waits for its bytes', () => {
    const decoder = new PeerExchangeDecoder();
    expect(decoder.push(header(MAX_PEER_EXCHANGE_PAYLOAD)).state).toBe('need-more');
    expect(decoder.push(Buffer.alloc(MAX_PEER_EXCHANGE_PAYLOAD - 1, 0xff)).state).toBe('need-more');
    expect(expectError(decoder.push(Buffer.from([0xff]))).kind).toBe('bad-payload');
  });

  test('wrong type_url is an error; rest is what follows the header', () => {
    const struct = toBinary(StructSchema, create(StructSchema, {}));
    for (const typeUrl of ['type.googleapis.com/google.protobuf.Value', '', 'type.googleapis.com/']) {
      const payload = anyBytes(typeUrl, struct);
      const error = expectError(new PeerExchangeDecoder().push(Buffer.concat([frameOf(payload), Buffer.from('!')])));
      expect(error.kind).toBe('bad-payload');
      expect(error.rest).toEqual(Buffer.concat([payload, Buffer.from('!')]));
    }
  });

  test('garbage or truncated payloads are errors', () => {
    expect(expectError(new PeerExchangeDecoder().push(frameOf(Buffer.alloc(10, 0xff)))).kind).toBe('bad-payload');
    const payload = FRAME.subarray(8);
    const cut = payload.subarray(0, payload.length - 10);
    expect(expectError(new PeerExchangeDecoder().push(frameOf(cut))).kind).toBe('bad-payload');
    const structCut = anyBytes('type.googleapis.com/google.protobuf.Struct', Buffer.from([0x0a, 0x20, 0x0a]));
    expect(expectError(new PeerExchangeDecoder().push(frameOf(structCut))).kind).toBe('bad-payload');
  });

  test('a Struct without x-envoy-peer-metadata is done with no peer (Envoy sets none)', () => {
    const outer = create(StructSchema, {
      fields: { 'x-envoy-peer-metadata-id': create(ValueSchema, { kind: { case: 'stringValue', value: 'id-1' } }) },
    });
    const payload = anyBytes('type.googleapis.com/google.protobuf.Struct', toBinary(StructSchema, outer));
    const done = expectDone(new PeerExchangeDecoder().push(frameOf(payload)));
    expect(done.peer).toBeUndefined();
    expect(done.nodeId).toBe('id-1');
  });

  test('a zero-length payload is an empty Any, which is not a Struct', () => {
    expect(expectError(new PeerExchangeDecoder().push(header(0))).kind).toBe('bad-payload');
  });

  test('end() before a whole frame: truncated, with the bytes so far; after done: that state', () => {
    const decoder = new PeerExchangeDecoder();
    decoder.push(FRAME.subarray(0, 20));
    const error = expectError(decoder.end());
    expect(error.kind).toBe('truncated');
    expect(error.rest).toEqual(FRAME.subarray(0, 20));

    const finished = new PeerExchangeDecoder();
    expectDone(finished.push(FRAME));
    expect(expectDone(finished.end()).rest.length).toBe(0);

    expect(expectError(new PeerExchangeDecoder().end()).rest.length).toBe(0);
  });

  test('empty chunks change nothing', () => {
    const decoder = new PeerExchangeDecoder();
    expect(decoder.push(Buffer.alloc(0)).state).toBe('need-more');
    expect(decoder.push(new Uint8Array(0)).state).toBe('need-more');
    expect(expectDone(decoder.push(new Uint8Array(FRAME))).peer).toEqual(ISTIO_124_PEER);
  });
});
