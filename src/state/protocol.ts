/**
 * Application protocol of a service port, derived the way istiod does it (istio/istio
 * pkg/config/kube/conversion.go `ConvertProtocol`, istio/istio pkg/config/protocol/instance.go
 * `Parse`).
 */
import type { PortProtocol } from './types.ts';

/** Case-insensitive protocol names Istio recognises (`protocol.Parse`). */
const BY_NAME: ReadonlyMap<string, PortProtocol> = new Map<string, PortProtocol>([
  ['tcp', 'TCP'],
  ['udp', 'UDP'],
  ['grpc', 'GRPC'],
  ['grpc-web', 'GRPC-Web'],
  ['http', 'HTTP'],
  // Istio's HTTP_PROXY is an HTTP-family protocol; this project has no separate value for it.
  ['http_proxy', 'HTTP'],
  ['http2', 'HTTP2'],
  ['https', 'HTTPS'],
  ['tls', 'TLS'],
  ['mongo', 'Mongo'],
  ['redis', 'Redis'],
  ['mysql', 'MySQL'],
]);

/** Ports Istio never sniffs: an undeclared protocol on them means TCP (SMTP, DNS, MySQL, MongoDB). */
const WELL_KNOWN_TCP_PORTS: ReadonlySet<number> = new Set([25, 53, 3306, 27017]);

/**
 * Parse one protocol name exactly (no prefix logic), case-insensitively: `HTTP`, `grpc-web`, ...
 * This is how ServiceEntry `ports[].protocol` is read. Unknown or empty ⇒ `'UNKNOWN'`.
 */
export function parseProtocol(name: string): PortProtocol {
  return BY_NAME.get(name.toLowerCase()) ?? 'UNKNOWN';
}

/**
 * Protocol of a Kubernetes Service port, as Istio derives it:
 * 1. transport `protocol: UDP` ⇒ `UDP`;
 * 2. when `appProtocol` is set (non-empty) it replaces the port name entirely — the Kubernetes
 *    standard values `kubernetes.io/h2c` ⇒ HTTP2, `kubernetes.io/ws` ⇒ HTTP, `kubernetes.io/wss` ⇒ HTTPS;
 * 3. a name starting with `grpc-web` ⇒ GRPC-Web;
 * 4. otherwise the part before the first `-` (`http-api` ⇒ `http`), parsed case-insensitively
 *    (`http`, `http2`, `grpc`, `https`, `tcp`, `tls`, `mongo`, `redis`, `mysql`, `udp`);
 * 5. unknown on a well-known port (25, 53, 3306, 27017) ⇒ TCP; else `'UNKNOWN'` (Istio's
 *    "unsupported", which the waypoint sniffs).
 */
export function portProtocol(
  name: string,
  appProtocol?: string,
  extra: { readonly port?: number; readonly transport?: string } = {},
): PortProtocol {
  if (extra.transport?.toUpperCase() === 'UDP') return 'UDP';
  let text = name;
  if (appProtocol) {
    switch (appProtocol) {
      case 'kubernetes.io/h2c':
        return 'HTTP2';
      case 'kubernetes.io/ws':
        return 'HTTP';
      case 'kubernetes.io/wss':
        return 'HTTPS';
    }
    text = appProtocol;
  }
  if (text.toLowerCase().startsWith('grpc-web')) return 'GRPC-Web';
  const dash = text.indexOf('-');
  const parsed = parseProtocol(dash >= 0 ? text.slice(0, dash) : text);
  if (parsed === 'UNKNOWN' && extra.port !== undefined && WELL_KNOWN_TCP_PORTS.has(extra.port)) return 'TCP';
  return parsed;
}

/** True for protocols carried over HTTP (Istio `Instance.IsHTTP`): HTTP, HTTP2, GRPC, GRPC-Web. */
export function isHttpProtocol(p: PortProtocol): boolean {
  return p === 'HTTP' || p === 'HTTP2' || p === 'GRPC' || p === 'GRPC-Web';
}
