/**
 * Protocol detection on the first bytes a client sends inside a tunnel, as Envoy's
 * `http_inspector` listener filter does for Istio's undeclared ports (istio/istio
 * pilot/pkg/networking/core/listener_waypoint.go; envoyproxy/envoy
 * source/extensions/filters/listener/http_inspector): the HTTP/2 connection preface means HTTP/2
 * (h2c with prior knowledge), an HTTP/1.x request line means HTTP/1.1, anything else TCP. The
 * request line ends at its LF, as for Envoy's inspector, so a line-based protocol (`PING\n`) is
 * TCP at once rather than when the detection timeout ends; bytes a request line cannot hold
 * (control characters) decide TCP without waiting for the line end. An
 * HTTP/0.9 request line (`GET /path` without a version) is reported as such: Envoy's inspector
 * takes it for TCP, and Node's HTTP/1 parser would take it for HTTP/1, so on a port declared HTTP
 * it goes to the connection manager, which refuses it (400 `DPE`). The bytes read are pushed back (`unshift`) so whoever
 * consumes the stream next sees them all.
 */
import type { Duplex } from 'node:stream';

/** What the first bytes showed. `closed`: the stream closed (reset) before a decision. */
export type SniffResult = 'HTTP/1.1' | 'HTTP/2' | 'HTTP/0.9' | 'TCP' | 'closed';

const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** Envoy's http_inspector gives up after this many bytes without a complete request line. */
const MAX_INSPECT_BYTES = 8192;
/** Bytes no request line holds: control characters other than HT (RFC 9112 §3). */
const REQUEST_LINE_CTL = /[\x00-\x08\x0a-\x1f\x7f]/;
/** A request-line method: RFC 9110 token characters. */
const TCHAR = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Methods that make `METHOD /path` an HTTP/0.9 request line (HTTP/0.9 had GET only; clients that omit the version send others too). */
const HTTP09_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'TRACE', 'CONNECT']);

/**
 * Classify `data` (the bytes seen so far): a result, or undefined when more bytes are needed.
 * Exported for unit tests.
 */
export function classify(data: Buffer): Exclude<SniffResult, 'closed'> | undefined {
  const n = Math.min(data.length, H2_PREFACE.length);
  if (data.subarray(0, n).equals(H2_PREFACE.subarray(0, n))) return n === H2_PREFACE.length ? 'HTTP/2' : undefined;
  const lf = data.indexOf(0x0a);
  // The line so far, without its CR (a CR may be the last byte before the LF yet to come).
  const to = lf < 0 ? Math.min(data.length, MAX_INSPECT_BYTES) : lf;
  const end = to > 0 && data[to - 1] === 0x0d ? to - 1 : to;
  if (REQUEST_LINE_CTL.test(data.toString('latin1', 0, end))) return 'TCP';
  if (lf < 0) {
    // Without a line end yet: keep waiting only while the bytes can still be a request line.
    if (data.length >= MAX_INSPECT_BYTES) return 'TCP';
    const sp = data.indexOf(0x20);
    const method = data.toString('latin1', 0, sp < 0 ? data.length : sp);
    return method.length === 0 || TCHAR.test(method) ? undefined : 'TCP';
  }
  const line = data.toString('latin1', 0, end);
  const parts = line.split(' ');
  if (parts.length === 2 && HTTP09_METHODS.has(parts[0]) && parts[1].startsWith('/')) return 'HTTP/0.9';
  return parts.length === 3 && TCHAR.test(parts[0]) && parts[1].length > 0 && /^HTTP\/1\.[01]$/.test(parts[2]) ? 'HTTP/1.1' : 'TCP';
}

/**
 * Outcome of {@link sniff}. The bytes read are pushed back into the stream, except when the
 * client ended its side before a decision (`ended`; `protocol` is then `TCP`): then they are in
 * `head` (the stream has already emitted 'end' and cannot take them back; undefined when the
 * client sent nothing at all, e.g. END_STREAM on the CONNECT itself) and the caller forwards
 * them itself.
 */
export interface Sniffed {
  readonly protocol: SniffResult;
  readonly head: Buffer | undefined;
  readonly ended: boolean;
}

/**
 * Read from `stream` until its first bytes decide the protocol, then push them back.
 * `timeoutMs` > 0: when the client has sent nothing decisive by then the result is `TCP` (so a
 * server-first protocol gets its upstream; Envoy would close the connection instead, see
 * waypoint-listener.ts); 0 waits for bytes indefinitely (declared HTTP ports, where only HTTP/1
 * vs HTTP/2 is open). Never rejects.
 */
export function sniff(stream: Duplex, timeoutMs: number): Promise<Sniffed> {
  return new Promise((resolve) => {
    let seen: Buffer = Buffer.alloc(0);
    let timer: NodeJS.Timeout | undefined;
    const finish = (protocol: SniffResult, ended = false) => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('close', onClose);
      if (timer) clearTimeout(timer);
      stream.pause();
      if (ended) return resolve({ protocol, head: seen.length > 0 ? seen : undefined, ended });
      if (seen.length > 0) stream.unshift(seen);
      resolve({ protocol, head: undefined, ended });
    };
    const onData = (chunk: Buffer) => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const result = classify(seen);
      if (result) finish(result);
    };
    // END_STREAM before a decision: relay as TCP whatever arrived (possibly nothing: a
    // half-closed client may still wait for a server-first greeting).
    const onEnd = () => finish('TCP', true);
    const onClose = () => finish('closed');
    stream.on('data', onData);
    stream.once('end', onEnd);
    stream.once('close', onClose);
    if (timeoutMs > 0) timer = setTimeout(() => finish('TCP'), timeoutMs);
  });
}
