/**
 * The waypoint Deployment, its pod made as Istio's own waypoint template makes it
 * (istio/istio manifests/charts/istio-control/istio-discovery/files/waypoint.yaml): labels, the
 * Prometheus annotations, the env the in-cluster mode reads, the `istio-token` and root
 * certificate volumes, the probes on the status port, and a locked-down security context.
 */
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { ITopologySpreadConstraint } from 'kubernetes-models/v1/TopologySpreadConstraint';

/** The pod's ports: HBONE, metrics (admin server) and status (readiness, liveness), as Istio numbers them. */
export const PORTS = {
  mesh: 15008,
  metrics: 15020,
  'status-port': 15021,
} as const;

/**
 * UID and GID the container runs as: Istio's proxy UID (1337), numeric so `runAsNonRoot` can be
 * checked without a passwd entry. The Dockerfile's `USER` is the same.
 */
export const PROXY_UID = 1337;

/**
 * Drain on SIGTERM (`waypoint run --drain-delay/--drain-timeout`): keep accepting for the delay
 * (Istio's `terminationDrainDuration` default, istio/istio pkg/config/mesh/mesh.go) while the pod's
 * endpoint is removed from ztunnels, then GOAWAY and let in-flight work finish up to the timeout.
 */
export const DRAIN = { delaySeconds: 5, timeoutSeconds: 20 } as const;

/** Added to the drain for the bounded close of the upstream side (1 s) and the exit itself. */
export const GRACE_MARGIN_SECONDS = 5;

/**
 * Requests and limits from the bench (`npm run bench -- --only core`, bench/README.md; run of
 * 2026-12-01 on commit b4413c0): 0.28 vCPU per 1000 req/s (1 KiB bodies over 16 HBONE connections),
 * RSS 153 MiB at ready and 223 MiB after the run with 1000 idle tunnels open, 35 KiB per idle
 * tunnel. The CPU request is about 1000 req/s; the memory limit leaves room for some 20 000 more
 * idle tunnels. No CPU limit: CFS throttling turns bursts into added latency, and the HPA scales on
 * the request.
 */
export const RESOURCES = {
  requests: { cpu: '300m', memory: '256Mi' },
  limits: { memory: '1Gi' },
} as const;

/** What varies between waypoints. */
export interface DeploymentOptions {
  readonly namespace: string;
  readonly name: string;
  readonly image: string;
  /** The pod labels; the Deployment selects on the Gateway name label alone, as Istio's. */
  readonly podLabels: Readonly<Record<string, string>>;
  readonly selector: Readonly<Record<string, string>>;
}

const TOKEN_DIR = '/var/run/secrets/tokens';
const ROOT_CERT_DIR = '/var/run/secrets/istio';

/** The waypoint container: `waypoint run --cluster` with the drain of {@link DRAIN}. */
function container(o: DeploymentOptions): IContainer {
  const probe = (path: string) => ({ httpGet: { path, port: PORTS['status-port'], scheme: 'HTTP' as const } });
  const fromField = (name: string, fieldPath: string) => ({ name, valueFrom: { fieldRef: { fieldPath } } });
  return {
    name: 'waypoint',
    image: o.image,
    imagePullPolicy: 'IfNotPresent',
    args: [
      'run',
      '--cluster',
      // Every listener on both families, as Istio's waypoint listens in a dual-stack pod (its
      // Service is PreferDualStack): a dual-stack socket on `::` takes IPv4 as well (an IPv6-less
      // pod falls back to 0.0.0.0, util/listen.ts). Prometheus scrapes the pod IP (the admin
      // server binds loopback by default).
      '--hbone',
      `[::]:${PORTS.mesh}`,
      '--readiness',
      `[::]:${PORTS['status-port']}`,
      '--admin',
      `[::]:${PORTS.metrics}`,
      '--drain-delay',
      `${DRAIN.delaySeconds}s`,
      '--drain-timeout',
      `${DRAIN.timeoutSeconds}s`,
    ],
    ports: Object.entries(PORTS).map(([name, containerPort]) => ({ name, containerPort, protocol: 'TCP' })),
    env: [
      fromField('POD_NAME', 'metadata.name'),
      fromField('POD_NAMESPACE', 'metadata.namespace'),
      fromField('INSTANCE_IP', 'status.podIP'),
      fromField('SERVICE_ACCOUNT', 'spec.serviceAccountName'),
      // Istio's defaults, spelled out as Istio's template does; TRUST_DOMAIN, ISTIO_META_NETWORK and
      // PROXY_CONFIG are left to their defaults (MeshConfig's trust domain, no network, istiod:15012).
      { name: 'ISTIO_META_CLUSTER_ID', value: 'Kubernetes' },
      { name: 'CA_ADDR', value: 'istiod.istio-system.svc:15012' },
    ],
    resources: { requests: { ...RESOURCES.requests }, limits: { ...RESOURCES.limits } },
    // Started once it listens (istiod may still be away: that is readiness' business, not liveness').
    startupProbe: { ...probe('/healthz/live'), periodSeconds: 1, failureThreshold: 30, timeoutSeconds: 1 },
    readinessProbe: { ...probe('/healthz/ready'), periodSeconds: 5, failureThreshold: 2, timeoutSeconds: 1 },
    // Only a stuck event loop fails it: never istiod or the API server being away.
    livenessProbe: { ...probe('/healthz/live'), periodSeconds: 10, failureThreshold: 6, timeoutSeconds: 5 },
    securityContext: {
      runAsUser: PROXY_UID,
      runAsGroup: PROXY_UID,
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
    volumeMounts: [
      { name: 'istio-token', mountPath: TOKEN_DIR, readOnly: true },
      { name: 'istiod-ca-cert', mountPath: ROOT_CERT_DIR, readOnly: true },
      { name: 'tmp', mountPath: '/tmp' },
    ],
  };
}

/** The Deployment: rolled one new pod at a time, never below the ready count. */
export function deployment(o: DeploymentOptions): IDeployment {
  const spread = (topologyKey: string): ITopologySpreadConstraint => ({
    maxSkew: 1,
    topologyKey,
    whenUnsatisfiable: 'ScheduleAnyway',
    labelSelector: { matchLabels: { ...o.selector } },
    // Spread each ReplicaSet of a rollout on its own, not the old pods and the new together.
    matchLabelKeys: ['pod-template-hash'],
  });
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: o.name, namespace: o.namespace, labels: { ...o.podLabels } },
    spec: {
      // No `replicas`: the HorizontalPodAutoscaler owns it (min 2), and an apply must not reset it.
      selector: { matchLabels: { ...o.selector } },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
      template: {
        metadata: {
          labels: { ...o.podLabels },
          annotations: {
            'prometheus.io/scrape': 'true',
            'prometheus.io/port': String(PORTS.metrics),
            'prometheus.io/path': '/stats/prometheus',
          },
        },
        spec: {
          serviceAccountName: o.name,
          // The in-cluster mode reads the Kubernetes API with this service account's token.
          automountServiceAccountToken: true,
          terminationGracePeriodSeconds: DRAIN.delaySeconds + DRAIN.timeoutSeconds + GRACE_MARGIN_SECONDS,
          securityContext: { runAsNonRoot: true, fsGroup: PROXY_UID, seccompProfile: { type: 'RuntimeDefault' } },
          topologySpreadConstraints: [spread('topology.kubernetes.io/zone'), spread('kubernetes.io/hostname')],
          containers: [container(o)],
          volumes: [
            {
              name: 'istio-token',
              projected: { sources: [{ serviceAccountToken: { audience: 'istio-ca', expirationSeconds: 43200, path: 'istio-token' } }] },
            },
            { name: 'istiod-ca-cert', configMap: { name: 'istio-ca-root-cert' } },
            // The root filesystem is read-only: anything written (Node's temp files) goes here.
            { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } },
          ],
        },
      },
    },
  };
}
