/**
 * Envoy response flags (short names from envoy source/common/stream_info/utility.h) and the one
 * table that maps each local failure to the status code Envoy's waypoint would answer with.
 * Dashboards built for Istio read `response_flags` with these exact strings.
 */
export const ResponseFlag = {
  /** No flag: Envoy prints `-`. */
  None: '-',
  /** No route / no filter chain for the target. */
  NoRouteFound: 'NR',
  /**
   * No cluster found: a route's backend does not exist (Istio's waypoint routes answer it with
   * 500, `cluster_not_found_response_code: INTERNAL_SERVER_ERROR`).
   */
  NoClusterFound: 'NC',
  /** No healthy upstream host. */
  NoHealthyUpstream: 'UH',
  /** Upstream connection failure (TCP, TLS, HBONE CONNECT refused). */
  UpstreamConnectionFailure: 'UF',
  /** Upstream connection terminated after it was established. */
  UpstreamConnectionTermination: 'UC',
  /** Upstream remote reset. */
  UpstreamRemoteReset: 'UR',
  /** Upstream request timeout. */
  UpstreamRequestTimeout: 'UT',
  /** Downstream connection terminated before the response completed. */
  DownstreamConnectionTermination: 'DC',
  /** Downstream protocol error (malformed request). */
  DownstreamProtocolError: 'DPE',
  /** Upstream protocol error. */
  UpstreamProtocolError: 'UPE',
  /** Connection drained / local reset while shutting down. */
  LocalReset: 'LR',
  /** Denied by the external authorization service. */
  UnauthorizedExternalService: 'UAEX',
  /** Stream idle timeout. */
  StreamIdleTimeout: 'SI',
  /** Upstream overflow (circuit breaking). */
  UpstreamOverflow: 'UO',
  /** The retry policy wanted another attempt but the retry limit was reached (added to the last attempt's flag). */
  UpstreamRetryLimitExceeded: 'URX',
  /**
   * Denied by policy: ztunnel's `ResponseFlags::AuthorizationPolicyDenied`, printed `DENY`
   * (istio/ztunnel src/proxy/metrics.rs). Used for NetworkPolicy denials (src/netpol), which have
   * no Envoy flag.
   */
  AuthorizationPolicyDenied: 'DENY',
  /** Refused or reset by the overload manager (buffered-bytes budget: src/pipeline/overload.ts). */
  OverloadManager: 'OM',
  /** Refused by the local rate limit (`istio.local_ratelimit`, Envoy's `RateLimited`). */
  RateLimited: 'RL',
  /** The fault filter delayed the request (Envoy's `DelayInjected`). */
  DelayInjected: 'DI',
  /** The fault filter aborted the request (Envoy's `FaultInjected`). */
  FaultInjected: 'FI',
  /**
   * A filter loaded from a WaypointFilter threw (or its promise rejected): answered 500. Envoy has
   * no flag for this (its filters cannot throw); like ztunnel's `DENY`, a word, so it cannot clash
   * with a future Envoy flag.
   */
  FilterError: 'FILTER_ERROR',
  /** A WaypointFilter's filter did not finish an asynchronous phase within its deadline: answered 504. */
  FilterTimeout: 'FILTER_TIMEOUT',
} as const;

export type ResponseFlagName = (typeof ResponseFlag)[keyof typeof ResponseFlag];

/** Status code Envoy answers with for a locally generated failure carrying this flag. */
export const LOCAL_REPLY_STATUS: Readonly<Record<string, number>> = Object.freeze({
  NR: 404,
  UH: 503,
  UF: 503,
  UC: 503,
  UR: 503,
  UO: 503,
  LR: 503,
  UT: 504,
  UPE: 502,
  DPE: 400,
  UAEX: 403,
  SI: 408,
  OM: 503,
  RL: 429,
});

/** Response body Envoy writes for each local reply (`<details>` is Envoy's response code details). */
export const LOCAL_REPLY_BODY: Readonly<Record<string, string>> = Object.freeze({
  NR: '',
  UH: 'no healthy upstream',
  UF: 'upstream connect error or disconnect/reset before headers. reset reason: connection failure',
  UC: 'upstream connect error or disconnect/reset before headers. reset reason: connection termination',
  UR: 'upstream connect error or disconnect/reset before headers. reset reason: remote reset',
  UT: 'upstream request timeout',
  UPE: 'upstream connect error or disconnect/reset before headers. reset reason: protocol error',
  LR: 'upstream connect error or disconnect/reset before headers. reset reason: local reset',
  UO: 'upstream connect error or disconnect/reset before headers. reset reason: overflow',
  SI: 'stream timeout',
  // Envoy's connection manager under `stop_accepting_requests` (conn_manager_impl.cc).
  OM: 'envoy overloaded',
  // Envoy's local rate limit filter (source/extensions/filters/http/local_ratelimit/local_ratelimit.cc).
  RL: 'local_rate_limited',
});
