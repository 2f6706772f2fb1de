/**
 * The objects of a namespace waypoint, the one source of `waypoint generate` and of deploy/base:
 * ServiceAccount (the identity), RBAC, Service, Deployment, PodDisruptionBudget,
 * HorizontalPodAutoscaler and the Gateway that istiod knows the waypoint by.
 */
import type { IGateway } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/Gateway';
import type { IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import type { IService } from 'kubernetes-models/v1/Service';
import type { IServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { rbacObjects, type RbacObject } from '../kube/index.ts';
import { deployment, PORTS } from './deployment.ts';

/** What `waypoint generate` takes. */
export interface ManifestOptions {
  /** Namespace of the waypoint (and of the workloads it serves). */
  readonly namespace: string;
  /** Name of the Gateway, its ServiceAccount (identity), Service and Deployment. */
  readonly name: string;
  readonly image: string;
  /** Kubernetes cluster domain, for the Service FQDN in the Gateway's address. */
  readonly clusterDomain: string;
}

/** One generated object: the base file it belongs to and why it is there (a comment above it). */
export interface Manifest {
  readonly file: string;
  readonly why: string;
  readonly object: { readonly apiVersion: string; readonly kind: string; readonly metadata?: { readonly name?: string; readonly namespace?: string } };
}

/** Istio's waypoint GatewayClass (istio/istio pkg/config/constants `WaypointGatewayClassName`). */
export const WAYPOINT_CLASS = 'istio-waypoint';

/**
 * The label istiod's deployment controller sets on what it deploys for a waypoint; istiod's
 * ambient index gives an object carrying it no waypoint of its own (istio/istio
 * pilot/pkg/serviceregistry/kube/controller/ambient/waypoints.go `fetchWaypointForService`), so
 * the namespace's `istio.io/use-waypoint` label does not point the waypoint's Service at itself.
 */
export const MANAGED_LABEL = { 'gateway.istio.io/managed': 'istio.io-mesh-controller' } as const;

/** The name of this waypoint's RBAC objects: one set per waypoint, so deleting one waypoint never breaks another. */
export function rbacName(namespace: string, name: string): string {
  return `node-waypoint:${namespace}:${name}`;
}

/** Why each RBAC object is there (its rules come from the kinds src/kube watches). */
const RBAC_WHY: Readonly<Record<RbacObject['kind'], string>> = {
  ClusterRole: 'Read-only access to the kinds the in-cluster mode watches (policies, routes, destination rules, Gateways, namespaces).',
  ClusterRoleBinding: 'Binds that ClusterRole to the waypoint service account.',
  Role: 'The istio ConfigMap (MeshConfig) and nothing else of the Istio namespace.',
  RoleBinding: 'Binds that Role to the waypoint service account.',
};

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

/** Why `value` is not a namespace name (a DNS-1123 label), or undefined when it is one. */
export function namespaceProblem(value: string): string | undefined {
  if (value.length > 63 || !DNS1123_LABEL.test(value)) return 'a namespace is a DNS-1123 label: at most 63 characters of a-z, 0-9 and "-", starting and ending with a letter or digit';
  return undefined;
}

/** Why `value` cannot name the waypoint (its Service name is a DNS-1035 label), or undefined. */
export function nameProblem(value: string): string | undefined {
  if (value.length > 63 || !DNS1035_LABEL.test(value)) return 'the name is also a Service name, a DNS-1035 label: at most 63 characters of a-z, 0-9 and "-", starting with a letter';
  if (value === 'none') return '"none" is reserved: istio.io/use-waypoint=none means "no waypoint"';
  return undefined;
}

/** The waypoint's objects in apply order (identity and RBAC first, the Gateway last, once its Service exists). */
export function waypointManifests(o: ManifestOptions): Manifest[] {
  const problem = namespaceProblem(o.namespace) ?? nameProblem(o.name) ?? (/^\S+$/.test(o.image) ? undefined : 'the image must be a non-empty reference without spaces');
  if (problem) throw new Error(problem);
  const { namespace, name } = o;
  const selector = { 'gateway.networking.k8s.io/gateway-name': name };
  const common = { 'app.kubernetes.io/name': 'node-waypoint', ...selector };
  const podLabels = {
    ...common,
    'gateway.networking.k8s.io/gateway-class-name': WAYPOINT_CLASS,
    ...MANAGED_LABEL,
    'istio.io/dataplane-mode': 'none',
    'sidecar.istio.io/inject': 'false',
    'service.istio.io/canonical-name': name,
    'service.istio.io/canonical-revision': 'latest',
  };
  const rbac = rbacObjects({ name: rbacName(namespace, name), serviceAccount: { namespace, name }, labels: common });
  const serviceAccount: IServiceAccount = { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace, labels: common } };
  const service: IService = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name,
      namespace,
      labels: { ...common, ...MANAGED_LABEL },
      // As Istio's waypoint Service: ztunnel prefers a waypoint in its own zone.
      annotations: { 'networking.istio.io/traffic-distribution': 'PreferClose' },
    },
    spec: {
      type: 'ClusterIP',
      // As Istio's waypoint Service (istio/istio manifests/charts/istio-control/istio-discovery/files/waypoint.yaml);
      // the pod listens on `[::]`, both families (deployment.ts).
      ipFamilyPolicy: 'PreferDualStack',
      selector,
      // Names and appProtocols as istiod gives its own waypoint's Service (a Gateway listener's
      // protocol in lower case: `hbone`; istio/istio pilot/pkg/config/kube/gateway/deploymentcontroller.go `extractServicePorts`).
      ports: [
        { name: 'status-port', port: PORTS['status-port'], targetPort: PORTS['status-port'], protocol: 'TCP', appProtocol: 'tcp' },
        { name: 'mesh', port: PORTS.mesh, targetPort: PORTS.mesh, protocol: 'TCP', appProtocol: 'hbone' },
        { name: 'metrics', port: PORTS.metrics, targetPort: PORTS.metrics, protocol: 'TCP', appProtocol: 'http' },
      ],
    },
  };
  const pdb: IPodDisruptionBudget = {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: { name, namespace, labels: common },
    spec: { maxUnavailable: 1, selector: { matchLabels: selector } },
  };
  const hpa: IHorizontalPodAutoscaler = {
    apiVersion: 'autoscaling/v2',
    kind: 'HorizontalPodAutoscaler',
    metadata: { name, namespace, labels: common },
    spec: {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name },
      minReplicas: 2,
      maxReplicas: 10,
      metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 70 } } }],
    },
  };
  const gateway: IGateway = {
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'Gateway',
    metadata: { name, namespace, labels: { 'istio.io/waypoint-for': 'service' } },
    spec: {
      gatewayClassName: WAYPOINT_CLASS,
      listeners: [{ name: 'mesh', port: PORTS.mesh, protocol: 'HBONE' }],
      addresses: [{ type: 'Hostname', value: `${name}.${namespace}.svc.${o.clusterDomain}` }],
    },
  };
  return [
    { file: 'serviceaccount.yaml', object: serviceAccount, why: "The waypoint's identity: spiffe://<trust domain>/ns/<namespace>/sa/<name>, named after the Gateway as Istio names its waypoints' service accounts." },
    ...rbac.map((object) => ({ file: 'rbac.yaml', object, why: RBAC_WHY[object.kind] })),
    { file: 'service.yaml', object: service, why: "The address the Gateway names: ztunnels reach the waypoint's pods through it on 15008 (HBONE)." },
    { file: 'deployment.yaml', object: deployment({ namespace, name, image: o.image, podLabels, selector }), why: 'The waypoint pods: `waypoint run --cluster`, identity from istiod, config from istiod and the Kubernetes API.' },
    { file: 'pdb.yaml', object: pdb, why: 'Voluntary disruptions (node drains) take one waypoint pod at a time.' },
    {
      file: 'hpa.yaml',
      object: hpa,
      why:
        'At least 2 replicas, so a roll or a node drain never leaves the namespace without a waypoint. CPU understates a waypoint\'s load: ' +
        'a ztunnel keeps one HBONE connection per destination and multiplexes every stream over it, and that connection stays on the ' +
        'replica it was opened to, so a new replica takes only new connections and the average hides the hot replica. ' +
        'Scale early (70 % of the request) and watch per-pod CPU and open tunnels, not only the average.',
    },
    {
      file: 'gateway.yaml',
      object: gateway,
      why:
        'The waypoint as istiod knows it. spec.addresses of type Hostname makes it unmanaged: istiod then deploys no Envoy waypoint ' +
        'for it (istio/istio pilot/pkg/config/kube/gateway IsManaged) and sends the Service FQDN to ztunnels as the waypoint address.',
    },
  ];
}
