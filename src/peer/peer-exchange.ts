/**
 * The TCP metadata exchange of ALPN `istio-peer-exchange` (istio/proxy
 * `source/extensions/filters/network/metadata_exchange/metadata_exchange.cc`): each side prefixes
 * its first bytes with
 *
 * ```
 * uint32 BE magic 0x3D230467 | uint32 BE length N | N bytes: google.protobuf.Any
 *   type_url = "type.googleapis.com/google.protobuf.Struct"
 *   value    = Struct { "x-envoy-peer-metadata": <peer Struct>, "x-envoy-peer-metadata-id": <node id> }
 * ```
 *
 * and then sends application data. Encoder and incremental decoder only; no sockets.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { AnySchema, StructSchema, ValueSchema, anyPack, anyUnpack } from '@bufbuild/protobuf/wkt';
import type { Value } from '@bufbuild/protobuf/wkt';
import type { PeerInfo } from './peer-info.ts';
import { PEER_METADATA_HEADER, PEER_METADATA_ID_HEADER } from './peer-metadata-header.ts';
import { peerFromStruct, peerToStruct } from './peer-struct.ts';

/**
 * First 4 bytes of an exchange frame (istio/proxy
 * source/extensions/filters/network/metadata_exchange/metadata_exchange_initial_header.h
 * `magic_number`).
 */
export const PEER_EXCHANGE_MAGIC = 0x3d230467;
/** Magic + length. */
export const PEER_EXCHANGE_HEADER_BYTES = 8;
/** Default largest payload {@link PeerExchangeDecoder} accepts: 64 KiB (Envoy has no limit). */
export const MAX_PEER_EXCHANGE_PAYLOAD = 64 * 1024;

/**
 * The exchange frame for this proxy: header + serialized Any. The inner Struct's keys are in
 * sorted order (Envoy serializes it deterministically); the id is omitted when `nodeId` is `''`,
 * as Envoy does.
 */
export function encodePeerExchange(peer: PeerInfo, nodeId: string): Buffer {
  const fields: Record<string, Value> = {
    [PEER_METADATA_HEADER]: create(ValueSchema, { kind: { case: 'structValue', value: peerToStruct(peer) } }),
  };
  if (nodeId !== '') {
    fields[PEER_METADATA_ID_HEADER] = create(ValueSchema, { kind: { case: 'stringValue', value: nodeId } });
  }
  const any = anyPack(StructSchema, create(StructSchema, { fields }));
  const payload = toBinary(AnySchema, any);
  const header = Buffer.alloc(PEER_EXCHANGE_HEADER_BYTES);
  header.writeUInt32BE(PEER_EXCHANGE_MAGIC, 0);
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

/** Why decoding failed. */
export type PeerExchangeErrorKind =
  /** The first bytes are not the magic: the peer does not speak the exchange. */
  | 'bad-magic'
  /** The declared length exceeds the decoder's limit. */
  | 'too-large'
  /**
   * The payload is not a valid `google.protobuf.Any` whose type_url names
   * `google.protobuf.Struct` (any host part, as protobuf's `Any::UnpackTo`, which Envoy uses),
   * or its value is not a valid Struct.
   */
  | 'bad-payload'
  /** {@link PeerExchangeDecoder.end} was called before a whole frame arrived. */
  | 'truncated';

/** What {@link PeerExchangeDecoder.push} reports. */
export type PeerExchangeState =
  | { readonly state: 'need-more' }
  | {
      readonly state: 'done';
      /** The peer, or `undefined` when the Struct had no `x-envoy-peer-metadata` struct. */
      readonly peer: PeerInfo | undefined;
      /** `x-envoy-peer-metadata-id`, `''` when absent. */
      readonly nodeId: string;
      /** Application data that followed the frame (possibly empty). */
      readonly rest: Buffer;
    }
  | {
      readonly state: 'error';
      readonly kind: PeerExchangeErrorKind;
      readonly error: string;
      /** The bytes Envoy's filter would pass on as application data; see {@link PeerExchangeDecoder}. */
      readonly rest: Buffer;
    };

export interface PeerExchangeDecoderOptions {
  /** Largest accepted payload length in bytes; default {@link MAX_PEER_EXCHANGE_PAYLOAD}. */
  readonly maxPayloadBytes?: number;
}

const NEED_MORE: PeerExchangeState = Object.freeze({ state: 'need-more' });

const MAGIC_BYTES = Buffer.alloc(4);
MAGIC_BYTES.writeUInt32BE(PEER_EXCHANGE_MAGIC, 0);

/**
 * Incremental reader of one peer's exchange frame. Feed it the connection's bytes in order with
 * {@link push}; it answers `need-more` until it can decide, then a terminal `done` or `error`.
 *
 * `rest` semantics, so a caller can act like Envoy's filter (which, on failure, marks the peer
 * unknown and lets the bytes through as application data):
 * - `done`: the bytes after the frame;
 * - `bad-magic`: every byte pushed so far, untouched — the peer sent application data directly
 *   (checked as soon as the bytes received differ from the magic, so a short server-first greeting
 *   is not held back waiting for 8 bytes);
 * - `too-large`, `bad-payload`: the bytes after the 8-byte header (Envoy drains the header before
 *   parsing the payload). These mean a broken or hostile peer; closing the connection is usually
 *   better than forwarding them;
 * - `truncated` (from {@link end}): every byte pushed so far.
 *
 * Memory is bounded: at most `maxPayloadBytes` + 8 bytes plus one pushed chunk are held, and a
 * declared length above the limit fails at once without allocating it. After a terminal state,
 * `push(chunk)` returns that same state with `rest` = `chunk` (pass-through). `rest` may be a view
 * of the pushed chunks (not a copy).
 * Never throws.
 */
export class PeerExchangeDecoder {
  readonly #maxPayloadBytes: number;
  #chunks: Buffer[] = [];
  #buffered = 0;
  #final: PeerExchangeState | undefined;

  constructor(options: PeerExchangeDecoderOptions = {}) {
    this.#maxPayloadBytes = options.maxPayloadBytes ?? MAX_PEER_EXCHANGE_PAYLOAD;
  }

  /** Add the next bytes of the stream; see the class docs for the result. */
  push(chunk: Uint8Array): PeerExchangeState {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.#final !== undefined) {
      return this.#final.state === 'need-more' ? NEED_MORE : { ...this.#final, rest: bytes };
    }
    if (bytes.length > 0) {
      this.#chunks.push(bytes);
      this.#buffered += bytes.length;
    }
    return this.#decide();
  }

  /** The stream ended: `truncated` unless a terminal state was already reached (then that state, empty `rest`). */
  end(): PeerExchangeState {
    if (this.#final !== undefined) {
      return this.#final.state === 'need-more' ? NEED_MORE : { ...this.#final, rest: Buffer.alloc(0) };
    }
    return this.#finish({
      state: 'error',
      kind: 'truncated',
      error: `stream ended after ${this.#buffered} bytes of a peer exchange frame`,
      rest: this.#all(),
    });
  }

  /** Everything buffered, as one Buffer (joined only when a terminal state needs it). */
  #all(): Buffer {
    if (this.#chunks.length === 0) return Buffer.alloc(0);
    if (this.#chunks.length > 1) this.#chunks = [Buffer.concat(this.#chunks, this.#buffered)];
    return this.#chunks[0]!;
  }

  /** A copy of the first `n` buffered bytes (n ≤ 8), without joining the chunks. */
  #peek(n: number): Buffer {
    const out = Buffer.alloc(Math.min(n, this.#buffered));
    let at = 0;
    for (const chunk of this.#chunks) {
      if (at === out.length) break;
      at += chunk.copy(out, at, 0, Math.min(chunk.length, out.length - at));
    }
    return out;
  }

  #finish(state: PeerExchangeState): PeerExchangeState {
    this.#final = state;
    this.#chunks = [];
    this.#buffered = 0;
    return state;
  }

  #decide(): PeerExchangeState {
    const head = this.#peek(PEER_EXCHANGE_HEADER_BYTES);
    const magicBytes = Math.min(head.length, 4);
    if (!head.subarray(0, magicBytes).equals(MAGIC_BYTES.subarray(0, magicBytes))) {
      return this.#finish({
        state: 'error',
        kind: 'bad-magic',
        error: 'no istio-peer-exchange magic: peer sent application data',
        rest: this.#all(),
      });
    }
    if (head.length < PEER_EXCHANGE_HEADER_BYTES) return NEED_MORE;
    const length = head.readUInt32BE(4);
    if (length > this.#maxPayloadBytes) {
      return this.#finish({
        state: 'error',
        kind: 'too-large',
        error: `peer exchange payload of ${length} bytes exceeds ${this.#maxPayloadBytes}`,
        rest: this.#all().subarray(PEER_EXCHANGE_HEADER_BYTES),
      });
    }
    if (this.#buffered < PEER_EXCHANGE_HEADER_BYTES + length) return NEED_MORE;
    const after = this.#all().subarray(PEER_EXCHANGE_HEADER_BYTES);
    const parsed = parsePayload(after.subarray(0, length));
    if ('error' in parsed) {
      return this.#finish({ state: 'error', kind: 'bad-payload', error: parsed.error, rest: after });
    }
    return this.#finish({ state: 'done', peer: parsed.peer, nodeId: parsed.nodeId, rest: after.subarray(length) });
  }
}

/** The Any → Struct → peer and id; an error for anything else. */
function parsePayload(payload: Uint8Array): { peer: PeerInfo | undefined; nodeId: string } | { error: string } {
  try {
    const any = fromBinary(AnySchema, payload, { readUnknownFields: false });
    const struct = anyUnpack(any, StructSchema);
    if (struct === undefined) return { error: `peer exchange Any has type_url ${JSON.stringify(any.typeUrl)}, not a Struct` };
    const metadata = struct.fields[PEER_METADATA_HEADER];
    const id = struct.fields[PEER_METADATA_ID_HEADER];
    return {
      peer: metadata?.kind.case === 'structValue' ? peerFromStruct(metadata.kind.value) : undefined,
      nodeId: id?.kind.case === 'stringValue' ? id.kind.value : '',
    };
  } catch (err) {
    return { error: `invalid peer exchange payload: ${(err as Error).message}` };
  }
}
