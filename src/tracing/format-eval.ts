/**
 * Filling parsed Envoy format strings (state/log-format.ts) from a tunnel and, for HTTP, its
 * request, the way Envoy's substitution formatter prints them (envoyproxy/envoy
 * source/common/formatter/substitution_formatter.cc): a missing value is `-` in text and `null`
 * in JSON, numbers stay numbers in JSON when the value is the operator alone. Used for
 * `envoyFileAccessLog` providers with a `logFormat` and for `formatter` custom span tags.
 */
import { ResponseFlag, type ConnectionContext, type StreamContext } from '../pipeline/index.ts';
import { formatHostPort, type FormatOperator, type FormatParts, type LogFormat } from '../state/index.ts';

type Value = string | number | null;

const whole = (ms: number) => Math.max(0, Math.floor(ms));

/** The value of one operator. `now` is the monotonic clock (ms) durations end at. */
export function operatorValue(o: FormatOperator, conn: ConnectionContext, stream: StreamContext | undefined, now: number): Value {
  const s = stream;
  switch (o.op) {
    case 'START_TIME':
      return new Date(s ? s.startTime : conn.startTime).toISOString();
    case 'REQ': {
      if (!s) return null;
      return requestHeader(s, o.header!) ?? (o.alt !== undefined ? requestHeader(s, o.alt) : undefined) ?? null;
    }
    case 'RESP':
      return s && s.upstreamResponseMonotonic > 0 ? String(whole(s.upstreamResponseMonotonic - s.startMonotonic)) : null;
    case 'PROTOCOL':
      return s ? s.protocol : null;
    case 'RESPONSE_CODE':
      return s ? s.responseCode : 0;
    case 'RESPONSE_FLAGS':
      return (s ? s.responseFlags : conn.responseFlags) || ResponseFlag.None;
    case 'RESPONSE_CODE_DETAILS':
      return s && s.responseCodeDetails ? s.responseCodeDetails.replace(/\s/g, '_') : null;
    case 'CONNECTION_TERMINATION_DETAILS':
      return !s && conn.rejectDetails ? conn.rejectDetails.replace(/\s/g, '_') : null;
    case 'BYTES_RECEIVED':
      return s ? s.bytesReceived : conn.bytesReceived;
    case 'BYTES_SENT':
      return s ? s.bytesSent : conn.bytesSent;
    case 'DURATION':
      return whole(now - (s ? s.startMonotonic : conn.startMonotonic));
    case 'UPSTREAM_HOST':
      return (s ? s.upstreamHost : conn.upstreamHost) || null;
    case 'UPSTREAM_CLUSTER':
    case 'UPSTREAM_CLUSTER_RAW':
      return (s ? s.upstreamCluster : conn.upstreamCluster) || null;
    case 'DOWNSTREAM_LOCAL_ADDRESS':
      return formatHostPort(conn.info.targetIp, conn.info.targetPort);
    case 'DOWNSTREAM_REMOTE_ADDRESS':
      return formatHostPort(conn.info.downstreamAddress, conn.info.downstreamPort);
    case 'ROUTE_NAME':
      return s && !s.responseFlags.split(',').includes(ResponseFlag.NoRouteFound) ? 'default' : null;
    case 'UPSTREAM_TRANSPORT_FAILURE_REASON':
    case 'UPSTREAM_LOCAL_ADDRESS':
    case 'REQUESTED_SERVER_NAME':
      return null;
  }
}

function requestHeader(s: StreamContext, name: string): string | undefined {
  if (name === ':method') return s.method;
  if (name === ':path') return s.forwardPath ?? s.path;
  if (name === ':authority' || name === 'host') return s.authority || undefined;
  if (name === 'x-request-id') return s.requestId || s.requestHeaders.get(name);
  return s.requestHeaders.joined(name);
}

function clip(v: Value, o: FormatOperator): Value {
  return typeof v === 'string' && o.maxLength !== undefined ? v.slice(0, o.maxLength) : v;
}

/** A format as text (`-` for what is unknown). */
export function renderText(parts: FormatParts, conn: ConnectionContext, stream: StreamContext | undefined, now: number = performance.now()): string {
  let out = '';
  for (const p of parts) {
    if (typeof p === 'string') out += p;
    else {
      const v = clip(operatorValue(p, conn, stream, now), p);
      out += v === null || v === '' ? '-' : String(v);
    }
  }
  return out;
}

/** A `logFormat` as one newline-terminated line: text, or a JSON object (`labels`). */
export function renderLine(format: LogFormat, conn: ConnectionContext, stream: StreamContext | undefined, now: number = performance.now()): string {
  if (format.kind === 'text') return renderText(format.parts, conn, stream, now);
  const obj: Record<string, Value> = {};
  for (const [key, parts] of format.fields) {
    const only = parts.length === 1 ? parts[0] : undefined;
    if (only !== undefined && typeof only !== 'string') {
      const v = clip(operatorValue(only, conn, stream, now), only);
      obj[key] = v === '' ? null : v;
    } else obj[key] = renderText(parts, conn, stream, now);
  }
  return `${JSON.stringify(obj)}\n`;
}
