/**
 * Counts gRPC messages in a body as it streams past, for `istio_request_messages_total` /
 * `istio_response_messages_total` (Envoy's grpc_stats filter, envoyproxy/envoy
 * source/common/grpc/codec.cc `FrameInspector`): a message is a 5-byte prefix (flags, uint32
 * big-endian length) and its payload; it counts when its first prefix byte is seen. Payload bytes
 * are skipped in bulk, so the cost is a few operations per message, not per byte. The router runs
 * one per direction on gRPC streams only.
 */
export class GrpcFrameCounter {
  /** Payload bytes of the current message still to skip. */
  private skip = 0;
  /** Prefix bytes of the current message seen so far (0: at a message boundary). */
  private prefix = 0;
  /** Length field being read from the prefix. */
  private length = 0;

  /** Feed the next chunk of the body; returns the number of messages that started in it. */
  inspect(chunk: Uint8Array): number {
    let started = 0;
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.skip > 0) {
        const take = Math.min(this.skip, n - i);
        this.skip -= take;
        i += take;
        continue;
      }
      if (this.prefix === 0) started++;
      else this.length = this.length * 256 + chunk[i];
      i++;
      if (++this.prefix === 5) {
        this.skip = this.length;
        this.prefix = 0;
        this.length = 0;
      }
    }
    return started;
  }
}

/** Trailer frames longer than this (bytes) are skipped unread: trailers are a few header lines. */
const MAX_TRAILER_BYTES = 16 * 1024;

/**
 * Finds the `grpc-status` of a gRPC-Web response in its body (istio/istio#58430): gRPC-Web sends
 * its trailers as the body's last frame, flagged 0x80, whose payload is HTTP/1-style header lines
 * (`grpc-status:0\r\ngrpc-message:…\r\n`; the gRPC-Web protocol spec, grpc/grpc
 * doc/PROTOCOL-WEB.md). Frames use the same 5-byte prefix as gRPC; message payloads are skipped
 * in bulk. `application/grpc-web-text` bodies are base64 (each segment padded on its own), decoded
 * as they stream past. The router runs one on the answer to a gRPC-Web request only.
 */
export class GrpcWebTrailerReader {
  /** The trailer frame's `grpc-status` value ('' until one was read). */
  status = '';
  private readonly text: boolean;
  /** Base64 characters not decoded yet (an incomplete 4-character group). */
  private carry = '';
  private skip = 0;
  private prefix = 0;
  private flags = 0;
  private length = 0;
  /** The trailer frame being read: bytes still to come, and what was kept of it. */
  private trailerLeft = 0;
  private trailer: Buffer[] = [];
  private kept = 0;

  /** `text`: the body is `application/grpc-web-text` (base64). */
  constructor(text: boolean) {
    this.text = text;
  }

  /** Feed the next chunk of the response body. */
  inspect(chunk: Uint8Array): void {
    if (!this.text) return this.frames(chunk);
    let s = this.carry + Buffer.from(chunk).toString('latin1').replace(/[^A-Za-z0-9+/=]/g, '');
    // Node's base64 decoder stops at the first `=`: decode up to the end of each padded group.
    for (;;) {
      const pad = s.indexOf('=');
      if (pad === -1) {
        const end = s.length - (s.length % 4);
        if (end > 0) this.frames(Buffer.from(s.slice(0, end), 'base64'));
        s = s.slice(end);
        break;
      }
      const groupEnd = (pad >> 2) * 4 + 4;
      if (groupEnd > s.length) break; // the rest of the padded group is still to come
      this.frames(Buffer.from(s.slice(0, groupEnd), 'base64'));
      s = s.slice(groupEnd);
    }
    this.carry = s;
  }

  private frames(chunk: Uint8Array): void {
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.trailerLeft > 0) {
        const take = Math.min(this.trailerLeft, n - i);
        if (this.kept + take <= MAX_TRAILER_BYTES) {
          this.trailer.push(Buffer.from(chunk.subarray(i, i + take)));
          this.kept += take;
        }
        this.trailerLeft -= take;
        i += take;
        if (this.trailerLeft === 0) this.endTrailer();
        continue;
      }
      if (this.skip > 0) {
        const take = Math.min(this.skip, n - i);
        this.skip -= take;
        i += take;
        continue;
      }
      if (this.prefix === 0) this.flags = chunk[i];
      else this.length = this.length * 256 + chunk[i];
      i++;
      if (++this.prefix === 5) {
        if ((this.flags & 0x80) !== 0) {
          this.trailerLeft = this.length;
          this.trailer = [];
          this.kept = 0;
          if (this.length === 0) this.endTrailer();
        } else this.skip = this.length;
        this.prefix = 0;
        this.length = 0;
      }
    }
  }

  private endTrailer(): void {
    if (this.kept === 0) return;
    const m = /(?:^|\n)\s*grpc-status\s*:\s*([^\r\n]*)/i.exec(Buffer.concat(this.trailer).toString('latin1'));
    if (m) this.status = m[1].trim();
    this.trailer = [];
  }
}
