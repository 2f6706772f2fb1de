/**
 * A small mesh for the authz unit tests: waypoint `foo/waypoint` (serving services and workloads),
 * namespace `foo` using it, Services httpbin (127.96.0.10:8000 http), other (127.96.0.12:8000 http),
 * tcp-echo (127.96.0.13:9000/9001 tcp), ServiceEntry ext (127.96.0.20:443 http, `ext.example.com`),
 * Service authz (127.96.0.30:9000 grpc, an ext_authz server), a Pod behind each, plus the
 * policies and MeshConfig a test passes.
 */
import { compileAuthz, type CompiledAuthz } from '../../../src/authz/compile.ts';
import type { AuthzResult, RequestAttributes } from '../../../src/authz/types.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import type { MeshPart, MeshSnapshot, Target } from '../../../src/state/types.ts';
import {
  authorizationPolicy,
  meshConfig as meshConfigDoc,
  meshText,
  namespace,
  pod,
  service,
  servicePort,
  toGateway,
  usesWaypoint,
  waypointGateway,
  type Doc,
  type ServicePortSpec,
} from '../../helpers/mesh.ts';

export const HTTPBIN = { ip: '127.96.0.10', port: 8000 };
export const OTHER = { ip: '127.96.0.12', port: 8000 };
export const TCP_ECHO = { ip: '127.96.0.13', port: 9000 };
export const EXT = { ip: '127.96.0.20', port: 443 };
export const HTTPBIN_POD = { ip: '127.244.2.10', port: 8080 };

export const SLEEP = 'spiffe://cluster.local/ns/foo/sa/sleep';
export const BAR_A = 'spiffe://cluster.local/ns/bar/sa/a';

const svc = (name: string, vip: string, ports: ServicePortSpec[]) => service({ name, namespace: 'foo', vip, ports });
const app = (name: string, ip: string, label: string) => pod({ name, namespace: 'foo', labels: { app: label }, sa: label, ip });

/** MeshConfig fields a test may set. */
export interface MeshConfigOptions {
  readonly trustDomain?: string;
  readonly trustDomainAliases?: readonly string[];
  readonly rootNamespace?: string;
  readonly pathNormalization?: string;
  readonly extensionProviders?: readonly object[];
}

/** The base objects (without policies). */
export function baseObjects(mesh: MeshConfigOptions = {}): Doc[] {
  const meshConfig: Record<string, unknown> = { trustDomain: mesh.trustDomain ?? 'cluster.local' };
  if (mesh.trustDomainAliases) meshConfig.trustDomainAliases = mesh.trustDomainAliases;
  if (mesh.rootNamespace) meshConfig.rootNamespace = mesh.rootNamespace;
  if (mesh.pathNormalization) meshConfig.pathNormalization = { normalization: mesh.pathNormalization };
  if (mesh.extensionProviders) meshConfig.extensionProviders = mesh.extensionProviders;
  return [
    meshConfigDoc(meshConfig),
    waypointGateway('foo', { for: 'all' }),
    namespace('foo', usesWaypoint()),
    svc('httpbin', HTTPBIN.ip, [servicePort('http', 8000, 8080)]),
    svc('other', OTHER.ip, [servicePort('http', 8000, 8080)]),
    svc('tcp-echo', TCP_ECHO.ip, [
      { name: 'tcp', port: 9000, appProtocol: 'tcp' },
      { name: 'tcp2', port: 9001, appProtocol: 'tcp' },
    ]),
    svc('authz', '127.96.0.30', [{ name: 'grpc', port: 9000 }]),
    {
      apiVersion: 'networking.istio.io/v1',
      kind: 'ServiceEntry',
      metadata: { name: 'ext', namespace: 'foo' },
      spec: { hosts: ['ext.example.com'], addresses: [EXT.ip], ports: [{ number: 443, name: 'http', protocol: 'HTTP' }], resolution: 'STATIC' },
    },
    app('httpbin-1', HTTPBIN_POD.ip, 'httpbin'),
    app('other-1', '127.244.2.12', 'other'),
    app('tcp-echo-1', '127.244.2.13', 'tcp-echo'),
  ];
}

/** A snapshot of the base mesh plus `policies` (any kept objects), compiled with `parts`. */
export function meshWith(policies: readonly object[], mesh: MeshConfigOptions = {}, parts: readonly MeshPart<unknown>[] = []): MeshSnapshot {
  return compileMesh({ text: meshText(...baseObjects(mesh), ...policies), file: 'authz-test.yaml', parts });
}

/** An AuthorizationPolicy object. */
export function policy(name: string, spec: object, opts: { namespace?: string; annotations?: Record<string, string> } = {}): object {
  return authorizationPolicy(name, spec, opts);
}

/** `targetRefs` to the waypoint's Gateway. */
export const TO_WAYPOINT = toGateway();

/** Resolve a target or fail the test. */
export function targetOf(snap: MeshSnapshot, at: { ip: string; port: number }): Target {
  const t = snap.resolveTarget(at.ip, at.port);
  if (!t) throw new Error(`no target at ${at.ip}:${at.port}`);
  return t;
}

/** Request attributes of a plain GET to httpbin from foo/sleep, overridable. */
export function request(over: Partial<RequestAttributes> = {}): RequestAttributes {
  return {
    principal: SLEEP,
    sourceIp: '127.244.1.5',
    destinationIp: HTTPBIN.ip,
    destinationPort: HTTPBIN.port,
    host: 'httpbin.foo:8000',
    method: 'GET',
    path: '/',
    ...over,
  };
}

/** Compile `policies` on the base mesh and return a checker for HTTP (default) or TCP. */
export function engine(policies: readonly object[], mesh: MeshConfigOptions = {}): {
  authz: CompiledAuthz;
  snap: MeshSnapshot;
  http: (attrs?: Partial<RequestAttributes>, at?: { ip: string; port: number }) => AuthzResult;
  tcp: (attrs?: Partial<RequestAttributes>, at?: { ip: string; port: number }) => AuthzResult;
} {
  const snap = meshWith(policies, mesh);
  const authz = compileAuthz(snap);
  return {
    authz,
    snap,
    http: (attrs = {}, at = HTTPBIN) => authz.forTarget(targetOf(snap, at)).http.evaluate(request({ destinationIp: at.ip, destinationPort: at.port, ...attrs })),
    tcp: (attrs = {}, at = TCP_ECHO) => authz.forTarget(targetOf(snap, at)).tcp.evaluate(request({ destinationIp: at.ip, destinationPort: at.port, ...attrs })),
  };
}

/** `policy(...)` with `targetRefs` to the waypoint, `rules` and `action`. */
export function wp(name: string, action: string, rules?: readonly object[], extra: object = {}): object {
  return policy(name, { targetRefs: TO_WAYPOINT, action, ...(rules ? { rules } : {}), ...extra });
}
