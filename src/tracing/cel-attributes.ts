/**
 * The Envoy request attributes CEL expressions read (envoyproxy/envoy docs
 * intro/arch_overview/advanced/attributes), from a tunnel and, for HTTP, its request: what the
 * waypoint records of them. Request attributes of a TCP tunnel are missing (a CEL error), as in
 * Envoy's network filters.
 */
import type { ConnectionContext, StreamContext } from '../pipeline/index.ts';

/** CEL's error value (a missing attribute, a header not sent): propagates except where `&&`/`||` decide. */
export const CEL_ERROR: unique symbol = Symbol('cel error');
/** The value of an expression, or {@link CEL_ERROR}. */
export type CelValue = string | number | boolean | typeof CEL_ERROR;

/** Static type of an attribute or expression. */
export type AttributeType = 'string' | 'int' | 'bool';

interface Attribute {
  readonly type: AttributeType | 'map';
  read(conn: ConnectionContext, stream: StreamContext | undefined): CelValue;
}

const http = (type: AttributeType, read: (s: StreamContext) => string | number | boolean | undefined): Attribute => ({
  type,
  read: (_c, s) => {
    if (s === undefined) return CEL_ERROR;
    const v = read(s);
    return v === undefined ? CEL_ERROR : v;
  },
});
const conn = (type: AttributeType, read: (c: ConnectionContext, s: StreamContext | undefined) => string | number | boolean | undefined): Attribute => ({
  type,
  read: (c, s) => {
    const v = read(c, s);
    return v === undefined ? CEL_ERROR : v;
  },
});

const upstreamHost = (c: ConnectionContext, s: StreamContext | undefined): string => (s ? s.upstreamHost : c.upstreamHost);
/** `ip:port` / `[v6]:port` → ip, port. */
function hostPart(hostPort: string, part: 'address' | 'port'): string | number | undefined {
  if (hostPort === '') return undefined;
  const colon = hostPort.lastIndexOf(':');
  if (part === 'port') return Number(hostPort.slice(colon + 1));
  const ip = hostPort.slice(0, colon);
  return ip.startsWith('[') ? ip.slice(1, -1) : ip;
}

/** Attributes by name. */
export const ATTRIBUTES: ReadonlyMap<string, Attribute> = new Map<string, Attribute>([
  ['request.path', http('string', (s) => s.forwardPath ?? s.path)],
  ['request.url_path', http('string', (s) => urlPath(s.forwardPath ?? s.path))],
  ['request.host', http('string', (s) => s.authority)],
  ['request.scheme', http('string', (s) => s.requestHeaders.get('x-forwarded-proto') ?? 'http')],
  ['request.method', http('string', (s) => s.method)],
  ['request.protocol', http('string', (s) => s.protocol)],
  ['request.useragent', http('string', (s) => s.requestHeaders.get('user-agent'))],
  ['request.id', http('string', (s) => s.requestId || undefined)],
  ['request.size', http('int', (s) => s.bytesReceived)],
  ['request.headers', { type: 'map', read: () => CEL_ERROR }],
  ['response.code', http('int', (s) => (s.responseCode === 0 ? undefined : s.responseCode))],
  ['response.code_details', http('string', (s) => s.responseCodeDetails || undefined)],
  ['response.grpc_status', http('int', (s) => (s.grpcStatus === '' ? undefined : Number(s.grpcStatus)))],
  ['response.size', http('int', (s) => s.bytesSent)],
  ['source.address', conn('string', (c) => c.info.downstreamAddress)],
  ['source.port', conn('int', (c) => c.info.downstreamPort)],
  ['destination.address', conn('string', (c) => c.info.targetIp)],
  ['destination.port', conn('int', (c) => c.info.targetPort)],
  ['upstream.address', conn('string', (c, s) => hostPart(upstreamHost(c, s), 'address') as string | undefined)],
  ['upstream.port', conn('int', (c, s) => hostPart(upstreamHost(c, s), 'port') as number | undefined)],
  // HBONE is always mutual TLS; a waypoint tunnel has no SNI.
  ['connection.mtls', conn('bool', () => true)],
  ['connection.requested_server_name', conn('string', () => '')],
  ['connection.id', conn('int', (c) => c.id)],
  ['xds.cluster_name', conn('string', (c, s) => (s ? s.upstreamCluster : c.upstreamCluster) || undefined)],
  ['xds.route_name', http('string', () => 'default')],
]);

function urlPath(path: string): string {
  const q = path.indexOf('?');
  return q < 0 ? path : path.slice(0, q);
}

/** `request.headers['name']` (`name` lower-case): repeated headers joined with `,`, as Envoy's header map. */
export function headerOf(stream: StreamContext | undefined, name: string): CelValue {
  if (stream === undefined) return CEL_ERROR;
  if (name === ':method') return stream.method;
  if (name === ':path') return stream.path;
  if (name === ':authority' || name === 'host') return stream.authority;
  return stream.requestHeaders.joined(name) ?? CEL_ERROR;
}
