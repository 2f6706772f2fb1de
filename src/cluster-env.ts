/**
 * The settings of `waypoint run --cluster`, read from what Istio's waypoint pod template gives the
 * proxy container (istio/istio manifests/charts/istio-control/istio-discovery/files/waypoint.yaml):
 * the downward-API env, Istio's env with their defaults, the projected istio-token and the
 * istio-ca-root-cert ConfigMap as files, and which Gateway this waypoint is.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { RenewalOptions } from './identity/index.ts';
import { DEFAULT_ISTIOD_ADDRESS, nodeMetadataFromEnv, parseIstiodAddress, xdsNode, type XdsNode } from './istiod/index.ts';
import type { WatchRetry } from './kube/index.ts';
import { normalizeIp } from './state/index.ts';
import type { BackoffSettings } from './util/index.ts';

/** Where kubelet mounts the projected service-account token of audience `istio-ca` (Istio's template). */
export const DEFAULT_TOKEN_FILE = '/var/run/secrets/tokens/istio-token';
/** Where the `istio-ca-root-cert` ConfigMap is mounted (Istio's template). */
export const DEFAULT_ROOT_CERT_FILE = '/var/run/secrets/istio/root-cert.pem';

/** Everything the in-cluster mode needs to find istiod, the Kubernetes API and itself. */
export interface ClusterSettings {
  readonly podName: string;
  readonly podNamespace: string;
  /** The pod's IP (`INSTANCE_IP`): a WDS `GatewayAddress` with it names this waypoint. */
  readonly instanceIp: string;
  /** The pod's service account (`SERVICE_ACCOUNT`): its identity, `spiffe://<td>/ns/<POD_NAMESPACE>/sa/<SERVICE_ACCOUNT>`. */
  readonly serviceAccount: string;
  /** `ISTIO_META_CLUSTER_ID`, sent to istiod as `ClusterID`. */
  readonly clusterId: string;
  /** `ISTIO_META_NETWORK` ('' for none). */
  readonly network: string;
  /** istiod's CA (`CA_ADDR`). */
  readonly caAddress: string;
  /** istiod's xDS (`PROXY_CONFIG` `discoveryAddress`). */
  readonly discoveryAddress: string;
  /** `TRUST_DOMAIN`; undefined: MeshConfig's (default cluster.local). */
  readonly trustDomain: string | undefined;
  /** The projected service-account token (audience `istio-ca`). */
  readonly tokenFile: string;
  /** istiod's root certificate(s). */
  readonly rootCertFile: string;
  /** `namespace/name` of this waypoint's Gateway. */
  readonly gateway: string;
  /** The xDS node sent to istiod (id and `ISTIO_META_*` metadata). */
  readonly node: XdsNode;
  /** The Kubernetes client configuration (default: KUBECONFIG, else the pod's service account). */
  readonly kubeConfig?: KubeConfig;
  /** Retry timing of istiod's streams, the watches and certificate issuance (tests shorten them). */
  readonly retry?: { readonly istiod?: BackoffSettings; readonly kube?: WatchRetry; readonly certificate?: RenewalOptions };
  /** How often the root file is polled for changes, in ms (default 5 s). */
  readonly rootPollMs?: number;
}

/** The `run --cluster` flags that override a default. */
export interface ClusterFlags {
  readonly tokenFile?: string;
  readonly rootCert?: string;
  /** `--gateway NS/NAME`. */
  readonly gateway?: string;
}

type Env = Readonly<Record<string, string | undefined>>;

/** What sets each required variable in Istio's waypoint template (the downward API). */
const REQUIRED: Readonly<Record<string, string>> = {
  POD_NAME: 'fieldRef metadata.name',
  POD_NAMESPACE: 'fieldRef metadata.namespace',
  INSTANCE_IP: 'fieldRef status.podIP',
  SERVICE_ACCOUNT: 'fieldRef spec.serviceAccountName',
};

/**
 * The settings from `env` (default `process.env`) and the flags.
 * @throws Error naming each required variable that is missing (POD_NAME, POD_NAMESPACE,
 *   INSTANCE_IP, SERVICE_ACCOUNT) or the variable or flag whose value is invalid.
 */
export function clusterSettingsFromEnv(flags: ClusterFlags = {}, env: Env = process.env): ClusterSettings {
  const missing = Object.keys(REQUIRED).filter((k) => !env[k]?.trim());
  if (missing.length > 0) {
    const how = missing.map((k) => `${k} (${REQUIRED[k]})`).join(', ');
    throw new Error(`--cluster: environment variable${missing.length > 1 ? 's' : ''} ${how} not set; Istio's waypoint pod template sets ${missing.length > 1 ? 'them' : 'it'} from the downward API`);
  }
  const instanceIp = normalizeIp(env.INSTANCE_IP!.trim());
  if (instanceIp === undefined) throw new Error(`--cluster: INSTANCE_IP ${JSON.stringify(env.INSTANCE_IP)} is not an IP address (the pod's status.podIP)`);
  const caAddress = address('CA_ADDR', env.CA_ADDR || DEFAULT_ISTIOD_ADDRESS);
  const discoveryAddress = address('PROXY_CONFIG discoveryAddress', proxyConfig(env.PROXY_CONFIG).discoveryAddress ?? DEFAULT_ISTIOD_ADDRESS);
  const podNamespace = env.POD_NAMESPACE!.trim();
  const serviceAccount = env.SERVICE_ACCOUNT!.trim();
  const gateway = flags.gateway ?? `${podNamespace}/${serviceAccount}`;
  if (!/^[^/\s]+\/[^/\s]+$/.test(gateway)) throw new Error(`--gateway ${JSON.stringify(gateway)}: expected NAMESPACE/NAME of the waypoint's Gateway`);
  const podName = env.POD_NAME!.trim();
  let node: XdsNode;
  try {
    node = xdsNode({ instanceIp, podName, podNamespace, nodeName: env.NODE_NAME ?? '', metadata: nodeMetadataFromEnv(env) });
  } catch (err) {
    throw new Error(`--cluster: ${(err as Error).message}`, { cause: err });
  }
  return {
    podName,
    podNamespace,
    instanceIp,
    serviceAccount,
    clusterId: env.ISTIO_META_CLUSTER_ID || 'Kubernetes',
    network: env.ISTIO_META_NETWORK ?? '',
    caAddress,
    discoveryAddress,
    trustDomain: env.TRUST_DOMAIN || undefined,
    tokenFile: flags.tokenFile ?? DEFAULT_TOKEN_FILE,
    rootCertFile: flags.rootCert ?? DEFAULT_ROOT_CERT_FILE,
    gateway,
    node,
  };
}

function address(what: string, value: string): string {
  try {
    parseIstiodAddress(value);
  } catch (err) {
    throw new Error(`--cluster: ${what}: ${(err as Error).message}`, { cause: err });
  }
  return value.trim();
}

/** `PROXY_CONFIG`: a JSON ProxyConfig (istio.mesh.v1alpha1.ProxyConfig); only `discoveryAddress` is read. */
function proxyConfig(text: string | undefined): { discoveryAddress?: string } {
  if (!text?.trim()) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new Error(`--cluster: PROXY_CONFIG is not JSON (a ProxyConfig, as istiod's injection writes it): ${(err as Error).message}`, { cause: err });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('--cluster: PROXY_CONFIG must be a JSON object (a ProxyConfig)');
  const d = (parsed as { discoveryAddress?: unknown }).discoveryAddress;
  if (d !== undefined && (typeof d !== 'string' || d === '')) throw new Error(`--cluster: PROXY_CONFIG discoveryAddress must be a non-empty host:port string, got ${JSON.stringify(d)}`);
  return { discoveryAddress: d };
}
