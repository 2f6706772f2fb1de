/**
 * The bootstrap configuration (`--config waypoint.yaml`): everything about the proxy itself, as
 * opposed to the mesh state. Parsed and validated once into a deep-frozen {@link BootstrapConfig};
 * every field has a default, so the file is optional. CLI flags override fields after parsing.
 *
 * Defaults follow ztunnel and Istio's Envoy waypoint where they have one (HBONE on 15008, admin
 * 15020, readiness 15021, HTTP/2 connection window 16 MiB, PING every 10 s with a 20 s timeout,
 * pool idle release after 5 min: istio/ztunnel src/config.rs, src/proxy/h2/*.rs; istio/istio
 * pilot/pkg/networking/core/listener_waypoint.go `h2KeepaliveInterval`), and Envoy's for request
 * limits. The stream window is smaller than ztunnel's on purpose (`http2.initialStreamWindowSize`).
 */
import fs from 'node:fs';
import { z } from 'zod';
import { LineCounter, parseDocument } from 'yaml';
import { ConfigError, deepFreeze } from '../util/index.ts';
import { parseTtl } from '../identity/index.ts';

const hostPort = z.string().regex(/^(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}$/, 'expected ADDR:PORT or [IPv6]:PORT');
/** A duration in ms; bounded by what Node timers accept (2^31-1 ms, about 24.8 days). */
const ms = z.number().int().nonnegative().max(2_147_483_647, 'at most 2147483647 ms (Node timers cannot wait longer)');

/** One entry of the ordered filter chain, as Envoy's `http_filters`. */
const filterEntry = z.strictObject({ name: z.string().min(1), config: z.unknown().optional() });

const schema = z.strictObject({
  listeners: z
    .strictObject({
      /** HBONE (mTLS HTTP/2 CONNECT) listener. Envoy's waypoint binds 0.0.0.0:15008. */
      hbone: hostPort.default('0.0.0.0:15008'),
      /** Admin server: /healthz/ready, /stats/prometheus, /config_dump. */
      admin: hostPort.default('127.0.0.1:15020'),
      /** Readiness probe (`/healthz/ready`), as Istio's status port. Empty string disables it. */
      readiness: hostPort.or(z.literal('')).default('0.0.0.0:15021'),
    })
    .prefault({}),
  identity: z
    .strictObject({
      /** Lifetime of the waypoint's own leaf certificate (at least 2s); renewed at half of it. */
      certTtl: z
        .string()
        .default('24h')
        .refine((v) => validTtl(v), { message: 'expected a duration of at least 2s, such as 24h, 90m or 3600s' }),
    })
    .prefault({}),
  upstream: z
    .strictObject({
      /** Port of the destination's HBONE server (ztunnel inbound). Tests move it off 15008. */
      hbonePort: z.number().int().min(1).max(65535).default(15008),
      /** Istio's default for a waypoint is LEAST_REQUEST. */
      loadBalancer: z.enum(['LEAST_REQUEST', 'ROUND_ROBIN']).default('LEAST_REQUEST'),
      /** TCP + TLS + HTTP/2 handshake budget toward an endpoint (ztunnel: 10 s). */
      connectTimeoutMs: ms.min(1).default(10_000),
      /**
       * Wait for the answer to a CONNECT on an established HBONE connection. The destination's
       * ztunnel answers once its own connect to the application is done (ztunnel gives that 10 s).
       * On expiry the attempt is a connect failure (`UF`, retried), and the connection must answer
       * a PING within a second or be closed, so a destination that stopped answering holds no
       * further requests.
       */
      connectResponseTimeoutMs: ms.min(1).default(10_000),
      /**
       * An endpoint whose connect (or CONNECT answer) timed out is left out of picks while other
       * endpoints remain, for this long, longer after each further one (base × their number, up to 300 s),
       * until a connect succeeds: Envoy's outlier detection on local-origin failures, base
       * ejection time 30 s (src/upstream/connect-ejection.ts). 0: never ejected.
       */
      connectTimeoutEjectionMs: ms.default(30_000),
      /** Most CONNECT streams per pooled HBONE connection (ztunnel POOL_MAX_STREAMS_PER_CONNECTION). */
      maxStreamsPerConnection: z.number().int().min(1).default(100),
      /** Release an HBONE connection after this long without streams (ztunnel: 5 min). */
      idleTimeoutMs: ms.default(300_000),
      /** Close an inner HTTP/1.1 keep-alive connection (one CONNECT stream) idle this long. */
      httpKeepAliveMs: ms.default(4_000),
    })
    .prefault({}),
  http2: z
    .strictObject({
      /**
       * Also the most one stream holds when its reader stalls: Node pushes every DATA frame into
       * the stream's buffer whether or not it is read (src/pipeline/overload.ts). 256 KiB, not
       * ztunnel's 4 MiB: large windows are what piles up in waypoints under slow readers
       * (istio/istio#59887); 256 KiB per round trip still moves 2 Gbit/s per stream at 1 ms.
       */
      initialStreamWindowSize: z.number().int().min(65_535).max(2 ** 31 - 1).default(256 * 1024),
      initialConnectionWindowSize: z.number().int().min(65_535).max(2 ** 31 - 1).default(16 * 1024 * 1024),
      maxFrameSize: z.number().int().min(16_384).max(16_777_215).default(1024 * 1024),
      /**
       * Advertised by the HBONE server: ztunnel's inbound value, 200 (istio/ztunnel
       * src/proxy/h2/server.rs), twice what a ztunnel client opens on one connection (its
       * POOL_MAX_STREAMS_PER_CONNECTION, 100). Envoy's waypoint advertises 100, but Node also
       * counts the streams closed earlier in the same read against this limit (src/node_http2.cc
       * `CanAddStream`): with 100, a client at 100 streams that cancels some and opens as many in
       * one write got the new ones refused (ENHANCE_YOUR_CALM).
       */
      maxConcurrentStreams: z.number().int().min(1).default(200),
      maxHeaderListSize: z.number().int().min(1024).default(64 * 1024),
      /** Node's per-session buffer cap (MB). Must exceed the windows above (nodejs/node#19141 lesson). */
      maxSessionMemoryMb: z.number().int().min(1).default(64),
      keepaliveIntervalMs: ms.default(10_000),
      keepaliveTimeoutMs: ms.default(20_000),
      /**
       * Most header fields in one request header block, pseudo-headers included (Envoy's
       * `max_headers_count`: 100); beyond it the stream is reset (ENHANCE_YOUR_CALM).
       */
      maxHeaderCount: z.number().int().min(4).max(65_535).default(100),
      /**
       * RST_STREAM budget of one downstream HTTP/2 session: `streamResetBurst` tokens refilled at
       * `streamResetRate` per second; when empty the session gets GOAWAY (nghttp2's rapid-reset
       * defence, CVE-2023-44487; its own default, 1000 and 33/s, closes busy HBONE sessions whose
       * clients end tunnels with RST_STREAM).
       */
      streamResetBurst: z.number().int().min(1).default(10_000),
      streamResetRate: z.number().int().min(1).default(1_000),
      /**
       * Envoy's rapid-reset rule (envoyproxy/envoy conn_manager_impl.cc `maybeDrainDueToPrematureResets`):
       * a stream the client resets before it is answered and within this lifetime is premature; a
       * session is closed (GOAWAY ENHANCE_YOUR_CALM) once `prematureResetTotalStreamCount` streams
       * closed and half of them were premature, or as soon as half that count were. 0 turns it off.
       */
      prematureResetMinStreamLifetimeMs: ms.default(1_000),
      prematureResetTotalStreamCount: z.number().int().min(0).default(500),
      /** Invalid frames one session may receive in its lifetime before it is closed (Node's default). */
      maxSessionInvalidFrames: z.number().int().min(0).default(1_000),
      /**
       * Streams in a row one session may have refused before it is closed (Node's default); at
       * least `maxConcurrentStreams` is used (Node refuses streams closed in the same read too).
       */
      maxSessionRejectedStreams: z.number().int().min(0).default(100),
      /** Our PINGs awaiting acknowledgement, at most (Node's default). */
      maxOutstandingPings: z.number().int().min(1).default(10),
      /** Our SETTINGS awaiting acknowledgement, at most (Node's default). */
      maxOutstandingSettings: z.number().int().min(1).default(10),
      /** Parameters accepted in one SETTINGS frame (Node's default). */
      maxSettings: z.number().int().min(1).default(32),
    })
    .prefault({}),
  http: z
    .strictObject({
      /** Largest request header block accepted from the downstream (bytes); beyond it: 431. */
      maxRequestHeadersBytes: z.number().int().min(1024).default(64 * 1024),
      /** Close an idle inner HTTP/1.1 connection after this long (0: never). */
      idleTimeoutMs: ms.default(3_600_000),
      /** Close a tunnel whose request in flight moved no bytes for this long (Envoy's stream_idle_timeout; 0: never). */
      streamIdleTimeoutMs: ms.default(300_000),
      /**
       * Per-request timeout (Envoy's route timeout: from the end of the downstream request to the
       * end of the response); 504 `UT` on expiry before the response started, a reset after.
       * 0 = none, Istio's default for waypoint routes.
       */
      requestTimeoutMs: ms.default(0),
      /**
       * On undeclared ports (and workload-addressed traffic) the first client bytes decide HTTP
       * or TCP; they are waited for this long, as long as Istio's waypoint waits: Envoy's default
       * `listener_filters_timeout`, 15 s (Istio sets none on the waypoint's internal listener,
       * istio/istio pilot/pkg/networking/core/listener_waypoint.go). Then Envoy closes the
       * connection; here it is treated as TCP, so server-first protocols work. 0: wait indefinitely.
       */
      protocolDetectionTimeoutMs: ms.default(15_000),
      /** Answer HTTP/1.0 with 426 as Envoy does without ISTIO_META_HTTP10 (default: accept it). */
      rejectHttp10: z.boolean().default(false),
      /**
       * Append the client address from the tunnel's `forwarded` header (else the tunnel's source
       * IP) to `x-forwarded-for`. Off by default: Istio's waypoint leaves XFF as the client sent it.
       */
      appendForwardedFor: z.boolean().default(false),
      /**
       * Istio's default waypoint retry policy (istio/istio
       * pilot/pkg/networking/core/route/retry/retry.go).
       */
      retry: z
        .strictObject({
          /** Retries after the first attempt (Envoy `num_retries`). */
          attempts: z.number().int().min(0).max(10).default(2),
          /** Envoy `retry_on` conditions. */
          retryOn: z
            .array(z.enum(['connect-failure', 'refused-stream', 'unavailable', 'cancelled', 'retriable-status-codes', 'reset', '5xx', 'gateway-error']))
            .default(['connect-failure', 'refused-stream', 'unavailable', 'cancelled', 'retriable-status-codes']),
          /** Status codes retried under `retriable-status-codes`. */
          retriableStatusCodes: z.array(z.number().int().min(100).max(599)).default([503]),
        })
        .prefault({}),
    })
    .prefault({}),
  /** Limits on what one downstream client may cost (README "Limits"). */
  limits: z
    .strictObject({
      /**
       * A client must finish its TLS handshake within this time (Envoy's
       * `transport_socket_connect_timeout`; counted as `downstream_cx_transport_socket_connect_timeout`).
       * Node's own default is 120 s; ztunnel gives a whole connection 10 s.
       */
      tlsHandshakeTimeoutMs: ms.min(1).default(10_000),
      /**
       * Per client IP (the source pod's in ambient mode); 0 turns a limit off. Concurrent HBONE
       * connections (ztunnel opens one per 100 concurrent streams per destination).
       */
      maxConnectionsPerPeer: z.number().int().min(0).default(1_000),
      /** New connections (TLS handshakes) per second, with a burst. */
      peerConnectionRate: z.number().int().min(0).default(100),
      peerConnectionBurst: z.number().int().min(1).default(1_000),
      /**
       * New CONNECT streams per second across the client's connections, with a burst. Beyond it a
       * stream is refused (REFUSED_STREAM), the session closed (GOAWAY ENHANCE_YOUR_CALM) and new
       * connections refused until the budget is half full again.
       */
      peerStreamRate: z.number().int().min(0).default(2_000),
      peerStreamBurst: z.number().int().min(1).default(4_000),
    })
    .prefault({}),
  /**
   * The overload manager's budget for buffered bytes (Envoy's overload manager with
   * `stop_accepting_requests` and `reset_high_memory_stream`; src/pipeline/overload.ts). What
   * one stream can hold is bounded by `http2.initialStreamWindowSize`.
   */
  overload: z
    .strictObject({
      /**
       * Bytes all streams and tunnels together may hold in their buffers. Default: a quarter of
       * V8's heap limit (which Node sizes from the machine's or container's memory).
       */
      maxBufferedBytes: z.number().int().min(1024 * 1024).optional(),
      /** Past this fraction of the budget, new CONNECTs and requests are answered 503 (flag `OM`). */
      stopAcceptingRequests: z.number().gt(0).max(1).default(0.9),
      /** Past this fraction, the streams holding the most are reset (flag `OM`) until under the first threshold. */
      resetHighMemoryStreams: z.number().gt(0).max(4).default(1),
      /** Only streams holding at least 2^this bytes are reset (Envoy's `minimum_account_to_track_power_of_two`). */
      minimumAccountToTrackPowerOfTwo: z.number().int().min(10).max(40).default(16),
      /** How often the buffers are sampled (Envoy's `refresh_interval`). */
      refreshIntervalMs: ms.min(10).max(60_000).default(250),
    })
    .refine((o) => o.stopAcceptingRequests <= o.resetHighMemoryStreams, {
      message: 'stopAcceptingRequests must not exceed resetHighMemoryStreams',
      path: ['stopAcceptingRequests'],
    })
    .prefault({}),
  drain: z
    .strictObject({
      /**
       * On SIGTERM, how long the waypoint keeps accepting new tunnels (readiness already false)
       * while ztunnels learn that the endpoint is gone; Istio's `terminationDrainDuration` default
       * (istio/istio pkg/config/mesh/mesh.go). 0 drains at once.
       */
      delayMs: ms.default(5_000),
      /** After the delay, how long in-flight requests may run before connections are closed. */
      timeoutMs: ms.default(5_000),
    })
    .prefault({}),
  /**
   * Access log override (Envoy's file access logger). Each field left out follows the mesh's
   * MeshConfig (`accessLogFile`, `accessLogEncoding`, read live); a field set here wins over it.
   * `file: ""` turns the log off whatever MeshConfig says; `/dev/stdout` and `/dev/stderr` write to
   * the process's own stdout/stderr.
   */
  accessLog: z
    .strictObject({
      file: z.string().optional(),
      encoding: z.enum(['TEXT', 'JSON']).optional(),
    })
    .prefault({}),
  /**
   * Kubernetes NetworkPolicy on the original client (beyond Istio). Traffic that passed a waypoint
   * reaches its destination from the waypoint's address, so ingress NetworkPolicies that select the
   * original client stop meaning what their authors wrote (istio.io docs
   * ambient/usage/networkpolicy).
   */
  networkPolicy: z
    .strictObject({
      /**
       * Evaluate the destination pod's ingress NetworkPolicies (`networking.k8s.io/v1` in the mesh
       * file) against the original source workload (the tunnel's source address and identity) and
       * the endpoint's target port, as the destination's CNI would have without the waypoint in the
       * path. TCP ports: a denial answers the CONNECT 401; HTTP: endpoints that deny are skipped, and
       * 403 `NetworkPolicy: access denied` when none allows. Flag `DENY` (ztunnel's). Enforced by
       * the `istio.authz` filter, which must then be in `filters`. Egress policies are not
       * evaluated. Default off, as in Istio.
       */
      enforceOnOriginalIdentity: z.boolean().default(false),
    })
    .prefault({}),
  /** Filters attached by WaypointFilter resources (user modules; README "Write a filter"). */
  extensions: z
    .strictObject({
      /**
       * How long a module filter's `onConnection` or `onRequestHeaders` may take when it returns a
       * promise: past it the request is answered 504 (the tunnel refused), flag `FILTER_TIMEOUT`.
       * 0 = no deadline. Built-in filters attached the same way have none (a fault delay waits).
       */
      phaseTimeoutMs: ms.default(10_000),
    })
    .prefault({}),
  /** The ordered HTTP filter chain. The router must come last. */
  filters: z
    .array(filterEntry)
    .min(1)
    // Istio's waypoint always runs peer metadata discovery, tracing (the connection manager's, on
    // when the Telemetry API or MeshConfig says so; before RBAC so denials get a span), RBAC
    // (with path normalization) and the standard stats.
    .default([{ name: 'istio.peer_metadata' }, { name: 'istio.tracing' }, { name: 'istio.authz' }, { name: 'istio.stats' }, { name: 'envoy.filters.http.router' }]),
});

function validTtl(v: string): boolean {
  try {
    return parseTtl(v) >= 2_000;
  } catch {
    return false;
  }
}

/** The parsed, defaulted and frozen bootstrap configuration. */
export type BootstrapConfig = z.infer<typeof schema>;

/** Defaults only (what runs when no `--config` is given). */
export function defaultBootstrap(): BootstrapConfig {
  return deepFreeze(schema.parse({}));
}

/**
 * Parse bootstrap YAML. Throws {@link ConfigError} naming the file, line and field on a YAML
 * syntax error, an unknown field, or a value of the wrong type or range.
 */
export function parseBootstrap(text: string, file: string): BootstrapConfig {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false });
  if (doc.errors.length > 0) {
    const e = doc.errors[0];
    throw new ConfigError(e.message.split('\n')[0], { file, line: lineCounter.linePos(e.pos[0]).line });
  }
  const raw = doc.toJS() ?? {};
  const result = schema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0];
    const issuePath = pathOf(issue);
    const path = issuePath.map(String);
    // Point at the deepest node of the path that exists in the document.
    let line: number | undefined;
    for (let n = path.length; n >= 0 && line === undefined; n--) {
      const node = doc.getIn(path.slice(0, n), true) as { range?: [number, number, number] } | undefined;
      if (node?.range) line = lineCounter.linePos(node.range[0]).line;
    }
    throw new ConfigError(issue.message, { file, line, field: formatPath(issuePath) });
  }
  return deepFreeze(result.data);
}

/** Read and parse a bootstrap file; throws {@link ConfigError} (also when the file is unreadable). */
export function loadBootstrap(file: string | undefined): BootstrapConfig {
  if (!file) return defaultBootstrap();
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read bootstrap config: ${(err as Error).message}`, { file });
  }
  return parseBootstrap(text, file);
}

/** A copy of `base` with `patch` merged in (CLI overrides), validated and frozen again. */
export function overrideBootstrap(base: BootstrapConfig, patch: Record<string, unknown>): BootstrapConfig {
  const merged: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined) continue;
    if (Array.isArray(v) || typeof v !== 'object' || v === null) {
      merged[k] = v;
      continue;
    }
    const defined = Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined));
    merged[k] = { ...(base as Record<string, object>)[k], ...defined };
  }
  const result = schema.safeParse(merged);
  if (!result.success) {
    throw new ConfigError(result.error.issues[0].message, { field: formatPath(pathOf(result.error.issues[0])) });
  }
  return deepFreeze(result.data);
}

/** Path of a zod issue; for an unknown key, the key itself (zod reports its parent). */
function pathOf(issue: z.core.$ZodIssue): PropertyKey[] {
  return issue.code === 'unrecognized_keys' ? [...issue.path, issue.keys[0]] : issue.path;
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');
}
