/**
 * The labels of Istio's standard metrics as Envoy's waypoint fills them: the `istio_stats` filter
 * with reporter `SERVER_GATEWAY` and `disable_host_header_fallback: true` (istio/proxy
 * source/extensions/filters/http/istio_stats/istio_stats.cc `populatePeerInfo`). Pure functions
 * over peers and the tunnel's target; nothing here reads a path, a header value or any other
 * unbounded input.
 *
 * Label order is Istio's. A tuple is split in three so each part is built once and shared:
 * source (reporter + 8 labels, per tunnel), destination (11 labels, per upstream peer and
 * service) and the tail (per request: protocol, code, gRPC status, flags, security policy).
 */
import { httpToGrpcStatus } from '../../src/pipeline/index.ts';
import type { PeerInfo } from '../../src/peer/index.ts';
import type { Target } from '../../src/state/index.ts';

export const UNKNOWN = 'unknown';
/** Istio's value for a missing source canonical revision. */
export const LATEST = 'latest';
/** `response_flags` when there is none (Envoy's `-`). */
export const NO_FLAGS = '-';
/** `reporter` on a waypoint (Envoy's `Reporter::ServerGateway`). */
export const REPORTER = 'waypoint';

/** reporter and the source labels, in Istio's order. */
export const SOURCE_LABEL_NAMES = Object.freeze([
  'reporter',
  'source_workload',
  'source_canonical_service',
  'source_canonical_revision',
  'source_workload_namespace',
  'source_principal',
  'source_app',
  'source_version',
  'source_cluster',
] as const);

/** The destination labels, in Istio's order. */
export const DESTINATION_LABEL_NAMES = Object.freeze([
  'destination_workload',
  'destination_workload_namespace',
  'destination_principal',
  'destination_app',
  'destination_version',
  'destination_service',
  'destination_canonical_service',
  'destination_canonical_revision',
  'destination_service_name',
  'destination_service_namespace',
  'destination_cluster',
] as const);

/** Labels of the gRPC message counters: peers and service only (Envoy adds them before the per-request tags). */
export const PEER_LABEL_NAMES: readonly string[] = Object.freeze([...SOURCE_LABEL_NAMES, ...DESTINATION_LABEL_NAMES]);
/** Labels of `istio_requests_total` and the request histograms. */
export const HTTP_LABEL_NAMES: readonly string[] = Object.freeze([
  ...PEER_LABEL_NAMES,
  'request_protocol',
  'response_code',
  'grpc_response_status',
  'response_flags',
  'connection_security_policy',
]);
/** Labels of the `istio_tcp_*` metrics. */
export const TCP_LABEL_NAMES: readonly string[] = Object.freeze([...PEER_LABEL_NAMES, 'request_protocol', 'response_flags', 'connection_security_policy']);

/**
 * Longest label value kept (characters). Peer fields can come from client-supplied baggage or
 * headers (up to 64 KiB): capping them keeps each series, and so the scrape, bounded in size as
 * well as in number (Kubernetes names are at most 253 characters).
 */
export const MAX_LABEL_VALUE = 256;

const or = (v: string, dflt: string): string => (v === '' ? dflt : v.length > MAX_LABEL_VALUE ? v.slice(0, MAX_LABEL_VALUE) : v);

/**
 * The namespace in a SPIFFE principal: what follows `/ns/` up to the next `/` (Envoy's
 * `getNamespace`); '' when there is none.
 */
export function principalNamespace(principal: string): string {
  const i = principal.indexOf('/ns/');
  if (i < 0) return '';
  const begin = i + 4;
  const end = principal.indexOf('/', begin);
  return end < 0 ? principal.slice(begin) : principal.slice(begin, end);
}

/**
 * reporter and the source labels: `peer` is the downstream peer (undefined without the
 * peer-metadata filter: Istio's labels without peer info), `principal` the tunnel's mTLS client
 * identity (Istio's `io.istio.peer_principal`; '' when none). The namespace comes from the
 * principal first, then from the peer.
 */
export function sourceLabels(peer: PeerInfo | undefined, principal: string): string[] {
  const ns = principalNamespace(principal) || (peer?.namespace ?? '');
  return [
    REPORTER,
    or(peer?.workload ?? '', UNKNOWN),
    or(peer?.service ?? '', UNKNOWN),
    or(peer?.revision ?? '', LATEST),
    or(ns, UNKNOWN),
    or(principal, UNKNOWN),
    or(peer?.app ?? '', UNKNOWN),
    or(peer?.version ?? '', UNKNOWN),
    or(peer?.cluster ?? '', UNKNOWN),
  ];
}

/**
 * The destination labels: workload, principal, app/version, canonical names and cluster from the
 * upstream peer (the endpoint that answered; undefined when none: `unknown`, revision included);
 * `destination_service*` from the service the tunnel targets (Envoy reads them from the cluster's
 * `istio.services[0]` metadata: host, name, namespace). Workload-addressed traffic goes through a
 * cluster without services, so those three are `unknown` there, as in Istio.
 */
export function destinationLabels(peer: PeerInfo | undefined, target: Target | undefined): string[] {
  const svc = target?.kind === 'service' ? target.service : undefined;
  // Istio names a ServiceEntry's service by its host (`Attributes.Name` = hostname).
  const svcName = svc === undefined ? '' : svc.kind === 'ServiceEntry' ? svc.hostname : svc.name;
  return [
    or(peer?.workload ?? '', UNKNOWN),
    or(peer?.namespace ?? '', UNKNOWN),
    or(peer?.identity ?? '', UNKNOWN),
    or(peer?.app ?? '', UNKNOWN),
    or(peer?.version ?? '', UNKNOWN),
    or(svc?.hostname ?? '', UNKNOWN),
    or(peer?.service ?? '', UNKNOWN),
    or(peer?.revision ?? '', UNKNOWN),
    or(svcName, UNKNOWN),
    or(svc?.namespace ?? '', UNKNOWN),
    or(peer?.cluster ?? '', UNKNOWN),
  ];
}

/**
 * `connection_security_policy`: `mutual_tls` when both the peer's and our own SAN are known
 * (always for HBONE: the waypoint has its certificate and requires the client's), else `none`.
 */
export function securityPolicy(principal: string): string {
  return principal === '' ? 'none' : 'mutual_tls';
}

/**
 * gRPC request by its `content-type` (Envoy's `Grpc::Common::hasGrpcContentType`):
 * `application/grpc`, or followed by `+` or `;` (so not gRPC-Web).
 */
export function isGrpcContentType(ct: string | undefined): boolean {
  if (ct === undefined || !ct.startsWith('application/grpc')) return false;
  if (ct.length === 16) return true;
  const c = ct.charCodeAt(16);
  return c === 0x2b /* + */ || c === 0x3b /* ; */;
}

/** The gRPC statuses Envoy knows (0 OK … 16 UNAUTHENTICATED), as label strings. */
const GRPC_STATUS_LABELS: readonly string[] = Object.freeze(Array.from({ length: 17 }, (_, i) => String(i)));

/** {@link grpcStatusCode} when the answer carried no status and no HTTP status was sent. */
export const NO_GRPC_STATUS = -2;

/**
 * The gRPC status of a gRPC request's answer (Envoy's `Grpc::Common::getGrpcStatus` over
 * trailers, then headers, then the HTTP status): `grpcStatus` is the answer's `grpc-status` (''
 * when none came), `responseCode` the HTTP status sent downstream (0 when none). Returns 0–16,
 * `-1` for a value that is not a known status (Envoy's `InvalidCode`, so the label stays bounded
 * whatever the upstream sends), or {@link NO_GRPC_STATUS}.
 */
export function grpcStatusCode(grpcStatus: string, responseCode: number): number {
  const n = grpcStatus.length;
  if (n === 0) return responseCode === 0 ? NO_GRPC_STATUS : httpToGrpcStatus(responseCode);
  let v = 0;
  for (let i = 0; i < n; i++) {
    const d = grpcStatus.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    v = v * 10 + d;
    if (v > 16) return -1;
  }
  return v;
}

/** `grpc_response_status` for a {@link grpcStatusCode} result ('' when none, as for non-gRPC requests). */
export function grpcStatusText(code: number): string {
  return code === NO_GRPC_STATUS ? '' : code < 0 ? '-1' : GRPC_STATUS_LABELS[code];
}

/** `grpc_response_status` of a gRPC request from its answer's `grpc-status` and HTTP status. */
export function grpcStatusLabel(grpcStatus: string, responseCode: number): string {
  return grpcStatusText(grpcStatusCode(grpcStatus, responseCode));
}
