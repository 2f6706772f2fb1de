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
