/**
 * One traced request: the waypoint's server span (Envoy's HTTP connection manager span, kind
 * SERVER, named by the route's decorator `<host>:<port>/*`), its optional upstream span per
 * attempt (Envoy's `spawn_upstream_span`, kind CLIENT, `router <cluster> egress`), and the tags
 * Envoy and Istio put on them when the request ends:
 *
 * - Envoy (envoyproxy/envoy source/common/tracing/http_tracer_impl.cc `finalizeDownstreamSpan`,
 *   `setCommonTags`; tag names in source/common/tracing/common_values.h): `guid:x-request-id`,
 *   `http.url`, `http.method`, `downstream_cluster`, `user_agent`, `http.protocol`,
 *   `peer.address`, `guid:x-client-trace-id`, `request_size`, `response_size`, `component`,
 *   `http.status_code`, `response_flags`, `error`, `upstream_cluster`, `upstream_cluster.name`,
 *   `upstream_address`, `grpc.path`, `grpc.authority`, `grpc.content_type`, `grpc.timeout`,
 *   `grpc.status_code`;
 * - Istio (istio/istio pilot/pkg/networking/core/tracing.go `buildServiceTags`,
 *   `buildWaypointSourceTags`): `istio.canonical_service`, `istio.canonical_revision`,
 *   `istio.mesh_id`, `istio.namespace`, `istio.cluster_id`, and on a waypoint (Istio 1.29+) the
 *   peers' `istio.source_*` / `istio.destination_*` (fields of istio/proxy
 *   extensions/common/metadata_object.h); plus the target's custom tags.
 *
 * The span status is ERROR for a 5xx, for no response, and for a local reply of 4xx/5xx (an
 * answer the waypoint made itself: RBAC denial, no route, ...).
 */
import { SpanKind, SpanStatusCode, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { downstreamPeerOf, UPSTREAM_PEER, type PeerInfo } from '../peer/index.ts';
import type { HeaderList, StreamContext } from '../pipeline/index.ts';
import type { TracingPolicy } from './compile.ts';
import { renderText } from './format-eval.ts';
import { injectContext, type IncomingContext } from './propagation.ts';
import { TracingRuntime } from './runtime.ts';

/** Envoy's default `max_path_tag_length`. */
const DEFAULT_MAX_PATH_TAG = 256;

/** The peer fields Istio's waypoint tags carry, tag suffix → PeerInfo field. */
const PEER_TAGS: readonly (readonly [string, keyof PeerInfo])[] = [
  ['workload', 'workload'],
  ['namespace', 'namespace'],
  ['cluster_id', 'cluster'],
  ['canonical_service', 'service'],
  ['canonical_revision', 'revision'],
  ['app', 'app'],
  ['app_version', 'version'],
  ['workload_type', 'type'],
  ['instance_name', 'name'],
];

/** See the module comment. Made only for traced targets; kept in the stream's slot. */
export class RequestTrace {
  readonly span: Span;
  private readonly tracer: Tracer;
  private readonly policy: TracingPolicy;
  private readonly incoming: IncomingContext | undefined;
  private readonly sampled: boolean;
  private upstream: Span | undefined;

  constructor(tracer: Tracer, policy: TracingPolicy, stream: StreamContext, operation: string, incoming: IncomingContext | undefined, sampled: boolean) {
    this.tracer = tracer;
    this.policy = policy;
    this.incoming = incoming;
    this.sampled = sampled;
    this.upstream = undefined;
    this.span = TracingRuntime.startSpan(tracer, operation, { kind: SpanKind.SERVER, startTime: stream.startTime, attributes: policy.attributes }, incoming?.parent, sampled);
  }

  /** Put the current span's context (the attempt's, else the server span's) on the upstream request. */
  inject(headers: HeaderList): void {
    if (!this.policy.contextPropagation) return;
    const parentId = this.incoming?.parent.spanId;
    const current = this.upstream ?? this.span;
    const own = current === this.span ? parentId : this.span.spanContext().spanId;
    injectContext(headers, current.spanContext(), this.incoming?.formats ?? 0, own, this.incoming?.b3Short ?? false);
  }

  /** A new upstream attempt: the previous attempt's span ends (it failed), a new CLIENT child starts and is propagated. */
  attempt(stream: StreamContext, headers: HeaderList): void {
    this.upstream?.end();
    const name = `router ${stream.upstreamCluster} egress`;
    const attributes: Attributes = { component: 'proxy', upstream_cluster: stream.upstreamCluster, 'upstream_cluster.name': stream.upstreamCluster };
    if (stream.upstreamHost) attributes.upstream_address = stream.upstreamHost;
    if (stream.attempts > 1) attributes['retry.count'] = String(stream.attempts - 1);
    this.upstream = TracingRuntime.startSpan(this.tracer, name, { kind: SpanKind.CLIENT, attributes }, this.span.spanContext(), this.sampled);
    this.inject(headers);
  }

  /** The request is over: tag and end the spans. */
  finish(stream: StreamContext): void {
    const up = this.upstream;
    if (up) {
      up.setAttribute('http.status_code', String(stream.responseCode));
      if (isError(stream)) up.setStatus({ code: SpanStatusCode.ERROR });
      up.end();
    }
    if (!this.span.isRecording()) {
      this.span.end();
      return;
    }
    this.span.setAttributes(this.attributes(stream));
    if (isError(stream)) this.span.setStatus({ code: SpanStatusCode.ERROR, message: stream.responseCodeDetails || undefined });
    this.span.end();
  }

  private attributes(s: StreamContext): Attributes {
    const h = s.requestHeaders;
    const max = this.policy.maxPathTagLength || DEFAULT_MAX_PATH_TAG;
    const a: Attributes = {
      'guid:x-request-id': s.requestId,
      'http.url': `${h.get('x-forwarded-proto') ?? 'http'}://${s.authority}${s.path}`.slice(0, max),
      'http.method': s.method,
      downstream_cluster: h.get('x-envoy-downstream-service-cluster') ?? '-',
      user_agent: h.get('user-agent') ?? '-',
      'http.protocol': s.protocol,
      'peer.address': s.conn.info.downstreamAddress,
      request_size: String(s.bytesReceived),
      response_size: String(s.bytesSent),
      'http.status_code': String(s.responseCode),
      response_flags: s.responseFlags,
    };
    const clientTraceId = h.get('x-client-trace-id');
    if (clientTraceId !== undefined) a['guid:x-client-trace-id'] = clientTraceId;
    if (s.responseCode === 0 || s.responseCode >= 500) a.error = 'true';
    if (s.upstreamCluster) {
      a.upstream_cluster = s.upstreamCluster;
      a['upstream_cluster.name'] = s.upstreamCluster;
    }
    if (s.upstreamHost) a.upstream_address = s.upstreamHost;
    if (s.isGrpc) {
      a['grpc.path'] = s.path;
      a['grpc.authority'] = s.authority;
      a['grpc.content_type'] = h.get('content-type') ?? '';
      const timeout = h.get('grpc-timeout');
      if (timeout !== undefined) a['grpc.timeout'] = timeout;
      if (s.grpcStatus !== '') a['grpc.status_code'] = s.grpcStatus;
    }
    peerTags(a, 'istio.source_', downstreamPeerOf(s));
    peerTags(a, 'istio.destination_', s.get(UPSTREAM_PEER));
    for (const [name, tag] of Object.entries(this.policy.customTags)) {
      if (tag.kind === 'header') a[name] = h.joined(tag.name) ?? tag.defaultValue;
      else if (tag.kind === 'formatter') a[name] = renderText(tag.parts, s.conn, s);
    }
    return a;
  }
}

function peerTags(a: Attributes, prefix: string, peer: PeerInfo | undefined): void {
  if (peer === undefined) return;
  for (const [tag, field] of PEER_TAGS) {
    const v = peer[field];
    if (typeof v === 'string' && v !== '') a[prefix + tag] = v;
  }
}

/** 5xx, no response at all, or a 4xx/5xx the waypoint answered itself. */
function isError(s: StreamContext): boolean {
  const code = s.responseCode;
  if (code === 0 || code >= 500) return true;
  return code >= 400 && s.responseCodeDetails !== 'via_upstream';
}
