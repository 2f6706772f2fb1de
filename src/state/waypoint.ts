/**
 * Pick the Gateway this process runs as: a Gateway API `Gateway` of class `istio-waypoint`
 * (istio/istio istioctl/pkg/waypoint/waypoint.go), and derive the waypoint's identity from it. Istio's
 * generated waypoint Deployment runs as a service account named after the Gateway.
 */
import { ConfigError } from '../util/index.ts';
import { LABEL_WAYPOINT_FOR } from './attachment.ts';
import { GatewaySchema } from './schemas.ts';
import type { SourceObject } from './source.ts';
import type { WaypointIdentity } from './types.ts';
import { parseAs } from './validate.ts';

type Labels = Readonly<Record<string, string>>;

/** `spec.gatewayClassName` of Istio waypoint Gateways. */
export const WAYPOINT_GATEWAY_CLASS = 'istio-waypoint';
/** API group of Gateway API objects (as opposed to Istio's own `networking.istio.io` Gateway). */
export const GATEWAY_API_GROUP = 'gateway.networking.k8s.io';

const WAYPOINT_FOR = new Set(['service', 'workload', 'all', 'none']);

/** True for a Gateway API Gateway with `spec.gatewayClassName: istio-waypoint` (validates its shape). */
export function isWaypointGateway(obj: SourceObject): boolean {
  if (obj.kind !== 'Gateway' || obj.group !== GATEWAY_API_GROUP) return false;
  return parseAs(GatewaySchema, obj).spec?.gatewayClassName === WAYPOINT_GATEWAY_CLASS;
}

/** Where the Gateways were looked for: the mesh file, or a name for objects not read from one. */
export interface GatewaySource {
  /** The file (errors are located there). */
  readonly file?: string;
  /** How messages name the source (`mesh.yaml`, `the Kubernetes API`). */
  readonly name: string;
}

/**
 * Choose among the waypoint Gateways of the input.
 * @param wanted `namespace/name` from the `gateway` option, if any.
 * @throws ConfigError when `wanted` is malformed or not found, when there is no waypoint Gateway
 *   (the message shows the YAML to add), or when there are several and `wanted` is not given.
 */
export function selectWaypointGateway(gateways: readonly SourceObject[], wanted: string | undefined, source: GatewaySource): SourceObject {
  const names = gateways.map((g) => `${g.namespace}/${g.name}`);
  const at = source.file === undefined ? {} : { file: source.file };
  if (wanted !== undefined) {
    const [ns, name, ...rest] = wanted.split('/');
    if (!ns || !name || rest.length) {
      throw new ConfigError(`gateway option must be "namespace/name", got ${JSON.stringify(wanted)}`, at);
    }
    const found = gateways.find((g) => g.namespace === ns && g.name === name);
    if (found) return found;
    if (gateways.length === 0) throw new ConfigError(noWaypointMessage(source.name, ns, name), at);
    throw new ConfigError(
      `no Gateway ${wanted} with gatewayClassName ${WAYPOINT_GATEWAY_CLASS} in ${source.name}; found: ${names.join(', ')}`,
      at,
    );
  }
  if (gateways.length === 1) return gateways[0];
  if (gateways.length === 0) throw new ConfigError(noWaypointMessage(source.name, 'default', 'waypoint'), at);
  throw new ConfigError(
    `${gateways.length} Gateways with gatewayClassName ${WAYPOINT_GATEWAY_CLASS} in ${source.name} (${names.join(', ')}); ` +
      `choose one with the gateway option, e.g. --gateway ${names[0]}`,
    at,
  );
}

function noWaypointMessage(source: string, namespace: string, name: string): string {
  return [
    `no Gateway with gatewayClassName ${WAYPOINT_GATEWAY_CLASS} in ${source}; the waypoint needs one to know who it is. Add:`,
    '---',
    `apiVersion: ${GATEWAY_API_GROUP}/v1`,
    'kind: Gateway',
    'metadata:',
    `  name: ${name}`,
    `  namespace: ${namespace}`,
    'spec:',
    `  gatewayClassName: ${WAYPOINT_GATEWAY_CLASS}`,
    '  listeners:',
    '  - name: mesh',
    '    port: 15008',
    '    protocol: HBONE',
  ].join('\n');
}

/**
 * `snapshot.waypoint` of a mesh compiled for a role that is not a waypoint (`withoutWaypoint`, the
 * inbound role): no name, no identity, `waypoint-for: none`, so nothing names it and it serves nothing.
 */
export const NO_WAYPOINT: WaypointIdentity = Object.freeze({ namespace: '', name: '', serviceAccount: '', identity: '', waypointFor: 'none' });

/**
 * `istio.io/waypoint-for` of a waypoint Gateway: its own label, else its GatewayClass's
 * (`classLabels`), else `service` (istio/istio pilot/pkg/serviceregistry/ambient/waypoints.go
 * `gatewayToWaypointTransform`).
 * @throws ConfigError when the value is not service, workload, all or none.
 */
export function waypointFor(gateway: SourceObject, classLabels: Labels = {}): WaypointIdentity['waypointFor'] {
  const own = parseAs(GatewaySchema, gateway).metadata.labels?.[LABEL_WAYPOINT_FOR];
  const value = own ?? classLabels[LABEL_WAYPOINT_FOR] ?? 'service';
  if (!WAYPOINT_FOR.has(value)) {
    const message = `${LABEL_WAYPOINT_FOR} must be service, workload, all or none, got ${JSON.stringify(value)}`;
    throw own !== undefined
      ? gateway.fail(message, ['metadata', 'labels', LABEL_WAYPOINT_FOR])
      : gateway.fail(`${message} (from GatewayClass ${WAYPOINT_GATEWAY_CLASS})`, ['spec', 'gatewayClassName']);
  }
  return value as WaypointIdentity['waypointFor'];
}

/**
 * Identity of the selected Gateway: service account = Gateway name,
 * `spiffe://<trustDomain>/ns/<namespace>/sa/<name>`, and `istio.io/waypoint-for` ({@link waypointFor}).
 * @throws ConfigError when `istio.io/waypoint-for` is not service, workload, all or none.
 */
export function waypointIdentity(gateway: SourceObject, trustDomain: string, classLabels: Labels = {}): WaypointIdentity {
  return {
    namespace: gateway.namespace,
    name: gateway.name,
    serviceAccount: gateway.name,
    identity: `spiffe://${trustDomain}/ns/${gateway.namespace}/sa/${gateway.name}`,
    waypointFor: waypointFor(gateway, classLabels),
  };
}
