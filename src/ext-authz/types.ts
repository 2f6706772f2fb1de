/**
 * Public shapes of the ext_authz client: what the authz filter passes for one check
 * ({@link CheckInput}) and what it gets back ({@link CheckOutcome}). Semantics follow Envoy's
 * `envoy.filters.http.ext_authz` / `envoy.filters.network.ext_authz` as Istio configures them
 * (istio/istio pilot/pkg/security/authz/builder/extauthz.go).
 */
import type { Duplex } from 'node:stream';
import type { HeaderMutation } from '../authz/index.ts';
import type { ResponseFlag } from '../pipeline/index.ts';
import type { Endpoint } from '../state/index.ts';

export type { HeaderMutation };

/**
 * Opens a byte stream to an endpoint of the provider's service: pass
 * `(ep, use) => clusterManager.openTcp(ep, use)`. `use` is the protocol that will run over it
 * (`h2` for gRPC, `http/1.1` for an HTTP provider), which matters for sidecar endpoints (ALPN).
 * Rejects when the endpoint is unreachable (the check then fails: `failOpen`/`statusOnError`).
 */
export type Dial = (endpoint: Endpoint, use: 'h2' | 'http/1.1') => Promise<Duplex>;

/** One side of the connection (`AttributeContext.Peer`). */
export interface CheckPeer {
  /** IP address (no brackets for IPv6). */
  readonly address: string;
  readonly port: number;
  /** SPIFFE URI of that side's certificate (`spiffe://td/ns/x/sa/y`); omitted = none. */
  readonly principal?: string;
}

/** The buffered request body (`includeRequestBodyInCheck`). */
export interface CheckBody {
  /**
   * What the filter buffered: the whole body, or, when the stream had more, at least
   * `maxRequestBytes` + 1 bytes (so that a partial body is detected as Envoy does:
   * `x-envoy-auth-partial-body` is `true` when more than `maxRequestBytes` were buffered).
   */
  readonly data: Buffer;
}

/** The HTTP request (`AttributeContext.Request.http`); absent for a TCP (network filter) check. */
export interface CheckHttpRequest {
  /** Request id (Envoy: the stream id); a fresh one is made when omitted. */
  readonly id?: string;
  /**
   * The request's `x-request-id` (kept or generated before any filter ran), added to the header
   * map when `headers` lack it, as Envoy's map has it.
   */
  readonly requestId?: string;
  /** `:method`. */
  readonly method: string;
  /** `:path` as forwarded upstream (normalized), query included. */
  readonly path: string;
  /** `:authority` / Host. */
  readonly host: string;
  /** `:scheme`; default `http` (inside an HBONE tunnel). */
  readonly scheme?: string;
  /** `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`; default `HTTP/1.1`. */
  readonly protocol?: string;
  /**
   * Request headers as a flat `[name, value, ...]` list (any case; pseudo-headers ignored: they
   * are rebuilt from the fields above). Repeated names are joined with `,`.
   */
  readonly headers: readonly string[];
  /** Request start (`AttributeContext.Request.time`); default now. */
  readonly time?: Date;
  /** Body bytes received so far (`HttpRequest.size`, Envoy's `bytesReceived`); default the body length or 0. */
  readonly size?: number;
  /** Only when the provider has `includeRequestBodyInCheck` and the request has a body. */
  readonly body?: CheckBody;
}

/** Everything one check sends (`CheckRequest.attributes`). */
export interface CheckInput {
  /** The downstream peer (the HBONE client: source workload address and identity). */
  readonly source: CheckPeer;
  /** This waypoint's side: the CONNECT target address and port, the waypoint's own identity. */
  readonly destination: CheckPeer;
  /** Omit for a TCP connection check. */
  readonly http?: CheckHttpRequest;
}

/** The request may go on. */
export interface CheckAllowed {
  readonly allow: true;
  /** Changes to the request before it goes upstream. */
  readonly headersToUpstream: readonly HeaderMutation[];
  /** Request headers to drop before it goes upstream (lower-case; never pseudo-headers or Host). */
  readonly headersToRemove: readonly string[];
  /** Changes to the response sent downstream. */
  readonly headersToDownstream: readonly HeaderMutation[];
  /**
   * Why it was allowed: `ok` (the server said so) or `failed-open` (the check failed and the
   * provider has `failOpen`; `error` says why).
   */
  readonly reason: 'ok' | 'failed-open';
  readonly error?: string;
}

/**
 * The request must be refused with this local reply (the filter sends it and sets the Envoy
 * response flag `UAEX`). For a TCP check the connection is closed instead.
 */
export interface CheckDenied {
  readonly allow: false;
  readonly status: number;
  /** Headers of the local reply, `[name, value]` in order, names lower-case. */
  readonly headers: readonly (readonly [string, string])[];
  readonly body: string;
  /**
   * `denied` (the server denied: Envoy details `ext_authz_denied`) or `error` (the check failed,
   * not fail-open: details `ext_authz_error`, status `statusOnError`).
   */
  readonly reason: 'denied' | 'error';
  /** For `error`: what failed (timeout, connection refused, gRPC status, HTTP 5xx, ...). */
  readonly error?: string;
  /** Envoy response flag to log: always `UAEX`. */
  readonly responseFlag: typeof ResponseFlag.UnauthorizedExternalService;
  /** Envoy response code details: `ext_authz_denied` or `ext_authz_error`. */
  readonly details: 'ext_authz_denied' | 'ext_authz_error';
}

export type CheckOutcome = CheckAllowed | CheckDenied;
