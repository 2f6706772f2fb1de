/**
 * Istio's access log: one line per inner HTTP request and one per TCP tunnel, in Istio's default
 * TEXT line or its default JSON object, written to a file (MeshConfig `accessLogFile`, usually
 * `/dev/stdout`). Off by default, as in Istio.
 *
 * Formats follow istio/istio pilot/pkg/model/telemetry_logging.go (`EnvoyTextLogFormat`,
 * `EnvoyJSONLogFormatIstio`) evaluated the way Envoy's substitution formatter does
 * (envoy/source/common/formatter): in TEXT an unknown value prints `-`, in JSON it is `null`;
 * `%RESPONSE_CODE%`, `%BYTES_*%` and `%DURATION%` are JSON numbers, header values (`%REQ(..)%`,
 * `%RESP(..)%`) are strings.
 *
 * Three layers: pure formatters over an {@link AccessLogEntry}; builders reading a
 * {@link StreamContext} / {@link ConnectionContext}; {@link AccessLogFilter}, the filter the core
 * puts first in every chain so its completion hooks (reverse order) run after every other filter
 * has set its flags, writing through {@link AccessLogSinks} (log-sinks.ts). Which files: the
 * bootstrap's `accessLog.file` when set, else the Telemetry API's `accessLogging[]` file
 * providers of the tunnel's target (with their filter expressions and formats), else MeshConfig.
 */
import type { Logger } from 'pino';
import { type ConnectionContext, type Filter, type StreamContext, ResponseFlag } from '../pipeline/index.ts';
import { formatHostPort, type AccessLogEncoding, type MeshSnapshot } from '../state/index.ts';
import { renderLine, telemetryOf, type AccessLogSink as TelemetryLog } from '../tracing/index.ts';
import type { AccessLogSink, AccessLogSinks } from './log-sinks.ts';

export { AccessLogSink, AccessLogSinks } from './log-sinks.ts';

/**
 * The values of one access log line, one field per Envoy command operator of Istio's default
 * format. `null` = unknown (TEXT `-`, JSON `null`). Times in ms.
 */
export interface AccessLogEntry {
  /** `%START_TIME%`: ms since the epoch; printed as ISO 8601 UTC with milliseconds. */
  readonly startTime: number;
  /** `%REQ(:METHOD)%`. */
  readonly method: string | null;
  /** `%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%`: the request's `:path` (query included). */
  readonly path: string | null;
  /** `%PROTOCOL%`: `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`; null on TCP. */
  readonly protocol: string | null;
  /** `%RESPONSE_CODE%`: 0 when no response was sent (and always on TCP, as Envoy). */
  readonly responseCode: number;
  /** `%RESPONSE_FLAGS%`: comma-joined short flags, `-` when none (Envoy prints `-` in JSON too). */
  readonly responseFlags: string;
  /** `%RESPONSE_CODE_DETAILS%` (`via_upstream`, ...). */
  readonly responseCodeDetails: string | null;
  /** `%CONNECTION_TERMINATION_DETAILS%` (e.g. an L4 RBAC deny). */
  readonly connectionTerminationDetails: string | null;
  /** `%UPSTREAM_TRANSPORT_FAILURE_REASON%`. */
  readonly upstreamTransportFailureReason: string | null;
  /** `%BYTES_RECEIVED%` / `%BYTES_SENT%`: body bytes (HTTP) or relayed bytes (TCP), from / to the downstream. */
  readonly bytesReceived: number;
  readonly bytesSent: number;
  /** `%DURATION%`: whole ms from start to completion (truncated, as Envoy). */
  readonly duration: number | null;
  /**
   * `%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%`: whole ms until the upstream's first response byte, a
   * string in JSON (it is a header value). Measured from the request's start; Envoy's router
   * measures from the end of the downstream request, the same for requests without a body.
   */
  readonly upstreamServiceTime: number | null;
  /** `%REQ(X-FORWARDED-FOR)%`, `%REQ(USER-AGENT)%`, `%REQ(X-REQUEST-ID)%`, `%REQ(:AUTHORITY)%`. */
  readonly xForwardedFor: string | null;
  readonly userAgent: string | null;
  readonly requestId: string | null;
  readonly authority: string | null;
  /** `%UPSTREAM_HOST%`: `ip:port` / `[v6]:port` of the endpoint used. */
  readonly upstreamHost: string | null;
  /** `%UPSTREAM_CLUSTER_RAW%`: Envoy cluster name. */
  readonly upstreamCluster: string | null;
  /** `%UPSTREAM_LOCAL_ADDRESS%`. */
  readonly upstreamLocalAddress: string | null;
  /** `%DOWNSTREAM_LOCAL_ADDRESS%`: the tunnel's target (Envoy's waypoint restores it from the CONNECT authority). */
  readonly downstreamLocalAddress: string | null;
  /** `%DOWNSTREAM_REMOTE_ADDRESS%`: the HBONE peer (source ztunnel / client pod). */
  readonly downstreamRemoteAddress: string | null;
  /** `%REQUESTED_SERVER_NAME%`: SNI (none inside a tunnel). */
  readonly requestedServerName: string | null;
  /** `%ROUTE_NAME%`. */
  readonly routeName: string | null;
}

const dash = (v: string | number | null): string | number => (v === null || v === '' ? '-' : v);

/**
 * Istio's default TEXT line (`EnvoyTextLogFormat`, Istio 1.9+ with `%UPSTREAM_CLUSTER_RAW%`),
 * newline-terminated. Values are printed as they are, as Envoy does.
 */
export function formatText(e: AccessLogEntry): string {
  return (
    `[${new Date(e.startTime).toISOString()}] "${dash(e.method)} ${dash(e.path)} ${dash(e.protocol)}" ` +
    `${e.responseCode} ${dash(e.responseFlags)} ${dash(e.responseCodeDetails)} ${dash(e.connectionTerminationDetails)} ` +
    `"${dash(e.upstreamTransportFailureReason)}" ${e.bytesReceived} ${e.bytesSent} ${dash(e.duration)} ${dash(e.upstreamServiceTime)} ` +
    `"${dash(e.xForwardedFor)}" "${dash(e.userAgent)}" "${dash(e.requestId)}" "${dash(e.authority)}" "${dash(e.upstreamHost)}" ` +
    `${dash(e.upstreamCluster)} ${dash(e.upstreamLocalAddress)} ${dash(e.downstreamLocalAddress)} ` +
    `${dash(e.downstreamRemoteAddress)} ${dash(e.requestedServerName)} ${dash(e.routeName)}\n`
  );
}

const orNull = (v: string | null): string | null => (v === '' ? null : v);

/**
 * Istio's default JSON object (`EnvoyJSONLogFormatIstio`: its 24 keys, sorted by name),
 * newline-terminated. Note Istio's key for `x-request-id` is `request_id`.
 */
export function formatJson(e: AccessLogEntry): string {
  return (
    JSON.stringify({
      authority: orNull(e.authority),
      bytes_received: e.bytesReceived,
      bytes_sent: e.bytesSent,
      connection_termination_details: orNull(e.connectionTerminationDetails),
      downstream_local_address: orNull(e.downstreamLocalAddress),
      downstream_remote_address: orNull(e.downstreamRemoteAddress),
      duration: e.duration,
      method: orNull(e.method),
      path: orNull(e.path),
      protocol: orNull(e.protocol),
      request_id: orNull(e.requestId),
      requested_server_name: orNull(e.requestedServerName),
      response_code: e.responseCode,
      response_code_details: orNull(e.responseCodeDetails),
      response_flags: e.responseFlags || ResponseFlag.None,
      route_name: orNull(e.routeName),
      start_time: new Date(e.startTime).toISOString(),
      upstream_cluster: orNull(e.upstreamCluster),
      upstream_host: orNull(e.upstreamHost),
      upstream_local_address: orNull(e.upstreamLocalAddress),
      upstream_service_time: e.upstreamServiceTime === null ? null : String(e.upstreamServiceTime),
      upstream_transport_failure_reason: orNull(e.upstreamTransportFailureReason),
      user_agent: orNull(e.userAgent),
      x_forwarded_for: orNull(e.xForwardedFor),
    }) + '\n'
  );
}

/** Format `e` in `encoding`. */
export function formatEntry(e: AccessLogEntry, encoding: AccessLogEncoding): string {
  return encoding === 'JSON' ? formatJson(e) : formatText(e);
}

/** `''` → null. */
const known = (v: string): string | null => (v === '' ? null : v);

/** A request header as Envoy's `%REQ(..)%` sees it (repeated headers comma-joined); null when absent or empty. */
function header(v: string | undefined): string | null {
  return v === undefined || v === '' ? null : v;
}

/** Envoy keeps details free of whitespace (StringUtil::replaceAllEmptySpace), so TEXT fields stay positional. */
function details(v: string): string | null {
  return v === '' ? null : v.replace(/\s/g, '_');
}

/**
 * The entry of one inner HTTP request, read when it completes. `now` is the monotonic clock
 * (ms, `performance.now()`) the duration is measured to. Headers are read from the request's
 * header list as the filters and the router left it (Envoy's `%REQ(..)%` reads the same mutable
 * map); the path is origin-form (the connection manager converted an absolute-form target). The
 * route name is Istio's default route's (`default`) unless no route was found (flag `NR`).
 */
export function entryFromStream(stream: StreamContext, now: number = performance.now()): AccessLogEntry {
  const info = stream.conn.info;
  const headers = stream.requestHeaders;
  const flags = stream.responseFlags || ResponseFlag.None;
  return {
    startTime: stream.startTime,
    method: known(stream.method),
    path: known(stream.forwardPath ?? stream.path),
    protocol: known(stream.protocol),
    responseCode: stream.responseCode,
    responseFlags: flags,
    responseCodeDetails: details(stream.responseCodeDetails),
    connectionTerminationDetails: null,
    upstreamTransportFailureReason: null,
    bytesReceived: stream.bytesReceived,
    bytesSent: stream.bytesSent,
    duration: Math.max(0, Math.floor(now - stream.startMonotonic)),
    upstreamServiceTime: stream.upstreamResponseMonotonic > 0 ? Math.max(0, Math.floor(stream.upstreamResponseMonotonic - stream.startMonotonic)) : null,
    xForwardedFor: header(headers.joined('x-forwarded-for')),
    userAgent: header(headers.joined('user-agent')),
    requestId: known(stream.requestId) ?? header(headers.get('x-request-id')),
    authority: known(stream.authority),
    upstreamHost: known(stream.upstreamHost),
    upstreamCluster: known(stream.upstreamCluster),
    upstreamLocalAddress: null,
    downstreamLocalAddress: formatHostPort(info.targetIp, info.targetPort),
    downstreamRemoteAddress: formatHostPort(info.downstreamAddress, info.downstreamPort),
    requestedServerName: null,
    routeName: flags.split(',').includes(ResponseFlag.NoRouteFound) ? null : 'default',
  };
}

/**
 * The entry of one TCP tunnel (Envoy's tcp_proxy access log with Istio's format): method, path and
 * protocol unknown, response code 0, bytes relayed each way, the CONNECT refusal details (if a
 * filter refused it) as connection termination details. `now` as in {@link entryFromStream}.
 */
export function entryFromConnection(conn: ConnectionContext, now: number = performance.now()): AccessLogEntry {
  const info = conn.info;
  return {
    startTime: conn.startTime,
    method: null,
    path: null,
    protocol: null,
    responseCode: 0,
    responseFlags: conn.responseFlags || ResponseFlag.None,
    responseCodeDetails: null,
    connectionTerminationDetails: details(conn.rejectDetails),
    upstreamTransportFailureReason: null,
    bytesReceived: conn.bytesReceived,
    bytesSent: conn.bytesSent,
    duration: Math.max(0, Math.floor(now - conn.startMonotonic)),
    upstreamServiceTime: null,
    xForwardedFor: null,
    userAgent: null,
    requestId: null,
    authority: null,
    upstreamHost: known(conn.upstreamHost),
    upstreamCluster: known(conn.upstreamCluster),
    upstreamLocalAddress: null,
    downstreamLocalAddress: formatHostPort(info.targetIp, info.targetPort),
    downstreamRemoteAddress: formatHostPort(info.downstreamAddress, info.downstreamPort),
    requestedServerName: null,
    routeName: null,
  };
}

/** Envoy's name for the file access logger. */
export const ACCESS_LOG_FILTER_NAME = 'envoy.access_loggers.file';

/** The bootstrap `accessLog` section: each field set overrides MeshConfig; unset follows it. */
export interface AccessLogOverride {
  /** '' = off. */
  readonly file?: string;
  readonly encoding?: AccessLogEncoding;
}

/**
 * Writes the access log from the completion hooks. Which file and encoding: the bootstrap
 * override's field when set, else MeshConfig `accessLogFile` / `accessLogEncoding` of the current
 * mesh snapshot, read per line, so a MeshConfig change applies to the next line. TCP lines are
 * written for tunnels relayed as bytes (`innerProtocol` `TCP`) and for tunnels a filter refused;
 * HTTP tunnels get one line per request instead. The hooks never throw.
 */
export class AccessLogFilter implements Filter {
  readonly name: string;
  private readonly override: AccessLogOverride;
  private readonly mesh: { readonly current: MeshSnapshot };
  private readonly sinks: AccessLogSinks;
  private readonly log: Logger;

  constructor(opts: { override: AccessLogOverride; mesh: { readonly current: MeshSnapshot }; sinks: AccessLogSinks; log: Logger }) {
    this.name = ACCESS_LOG_FILTER_NAME;
    this.override = opts.override;
    this.mesh = opts.mesh;
    this.sinks = opts.sinks;
    this.log = opts.log;
  }

  onStreamComplete(stream: StreamContext): void {
    try {
      const logs = this.telemetryLogs(stream.conn);
      if (logs !== undefined) return this.writeTelemetry(logs, stream.conn, stream);
      const to = this.destination();
      if (to) to.sink.write(formatEntry(entryFromStream(stream), to.encoding));
    } catch (err) {
      this.log.debug({ err }, 'access log: request line failed');
    }
  }

  onConnectionComplete(conn: ConnectionContext): void {
    try {
      if (conn.innerProtocol !== 'TCP' && conn.rejectStatus === 0) return;
      const logs = this.telemetryLogs(conn);
      if (logs !== undefined) return this.writeTelemetry(logs, conn, undefined);
      const to = this.destination();
      if (to) to.sink.write(formatEntry(entryFromConnection(conn), to.encoding));
    } catch (err) {
      this.log.debug({ err }, 'access log: connection line failed');
    }
  }

  /**
   * The Telemetry API's access logs of the tunnel's target (`accessLogging[]`, src/tracing), unless
   * the bootstrap names the file; undefined: MeshConfig `accessLogFile` applies.
   */
  private telemetryLogs(conn: ConnectionContext): readonly TelemetryLog[] | undefined {
    return this.override.file === undefined ? telemetryOf(conn).accessLogs : undefined;
  }

  /**
   * One line per provider whose filter expression is true (an expression that fails to evaluate,
   * e.g. `response.code` on a TCP tunnel, logs nothing, as Envoy's CEL filter), in the provider's
   * `logFormat`, else Istio's TEXT line.
   */
  private writeTelemetry(logs: readonly TelemetryLog[], conn: ConnectionContext, stream: StreamContext | undefined): void {
    let text: string | undefined;
    for (const l of logs) {
      if (l.filter !== undefined && l.filter.evaluate(conn, stream) !== true) continue;
      const sink = this.sinks.use(l.file.path, true);
      if (!sink) continue;
      const format = l.file.format;
      sink.write(format ? renderLine(format, conn, stream) : (text ??= formatText(stream ? entryFromStream(stream) : entryFromConnection(conn))));
    }
  }

  /** Where the next line goes, or undefined when the log is off. */
  private destination(): { sink: AccessLogSink; encoding: AccessLogEncoding } | undefined {
    const o = this.override;
    let file = o.file;
    let encoding = o.encoding;
    if (file === undefined || encoding === undefined) {
      const m = this.mesh.current.meshConfig;
      file ??= m.accessLogFile;
      encoding ??= m.accessLogEncoding;
    }
    if (!file) return undefined;
    const sink = this.sinks.use(file);
    return sink ? { sink, encoding } : undefined;
  }
}
