/**
 * The links between the waypoint's objects, on deploy/base and on a `generate` with another
 * namespace and name (so nothing is spelled for one of them only): selectors ↔ pod labels,
 * ServiceAccount ↔ Gateway name ↔ pod identity ↔ RBAC subjects, Service ports ↔ container ports ↔
 * probes ↔ Prometheus annotations, mounts ↔ volumes, the drain ↔ the grace period, the RBAC ↔
 * WATCHED_KINDS, and the Gateway unmanaged by istiod's own rule.
 */
import { describe, expect, test } from 'vitest';
import { baseOptions, generateYaml } from '../../src/deploy/index.ts';
import { ISTIO_ROOT_NAMESPACE as ISTIO_NAMESPACE, WATCHED_KINDS } from '../../src/kube/index.ts';
import { durationFlag } from '../../src/cli/flags.ts';
import { VERSION } from '../../src/util/index.ts';
import { baseObjects, parseStream, type K8s } from './objects.ts';

/**
 * istiod's decision (istio/istio pilot/pkg/config/kube/gateway/conversion.go `IsManaged`, 1.29;
 * gatewaycommon/gateway_utils.go on master): no address, or one IP address, means istiod deploys
 * the gateway itself; anything else (here one Hostname) means someone else runs it.
 */
function istioIsManaged(spec: { addresses?: { type?: string; value: string }[] }): boolean {
  const a = spec.addresses ?? [];
  if (a.length === 0) return true;
  if (a.length > 1) return false;
  return a[0].type === undefined || a[0].type === 'IPAddress';
}

/**
 * What the in-cluster mode watches through the Kubernetes API (issue 13: policies, routes,
 * DestinationRules, this Gateway and its class, ServiceEntry/WorkloadEntry, Namespace labels, the
 * `istio` ConfigMap; plus PeerAuthentication, Telemetry and NetworkPolicy, which the compiled mesh
 * reads), as `group/resource`, spelled out here so the RBAC cannot silently lose one.
 */
const EXPECTED_KINDS = [
  'security.istio.io/authorizationpolicies',
  'security.istio.io/requestauthentications',
  'security.istio.io/peerauthentications',
  'telemetry.istio.io/telemetries',
  'extensions.node-waypoint.dev/waypointfilters',
  'gateway.networking.k8s.io/httproutes',
  'gateway.networking.k8s.io/grpcroutes',
  'gateway.networking.k8s.io/gateways',
  'gateway.networking.k8s.io/gatewayclasses',
  'networking.istio.io/destinationrules',
  'networking.istio.io/serviceentries',
  'networking.istio.io/workloadentries',
  'networking.k8s.io/networkpolicies',
  '/namespaces',
  '/configmaps',
];

test('WATCHED_KINDS is the list of what the in-cluster mode watches', () => {
  expect(WATCHED_KINDS.map((k) => `${k.group}/${k.plural}`)).toEqual(EXPECTED_KINDS);
});

const subset = (small: Record<string, string>, big: Record<string, string> | undefined) => Object.entries(small).every(([k, v]) => big?.[k] === v);

const sets: { name: string; ns: string; wp: string; objects: () => K8s[] }[] = [
  { name: 'deploy/base', ns: 'default', wp: 'waypoint', objects: baseObjects },
  {
    name: 'generate -n shop --name edge',
    ns: 'shop',
    wp: 'edge',
    objects: () => parseStream(generateYaml({ ...baseOptions(VERSION), namespace: 'shop', name: 'edge' }, VERSION), 'generate'),
  },
];

describe.each(sets)('$name', ({ ns, wp, objects }) => {
  const all = objects();
  const one = (kind: string) => {
    const found = all.filter((o) => o.kind === kind);
    expect(found, kind).toHaveLength(1);
    return found[0];
  };
  const deployment = one('Deployment');
  const pod = deployment.spec.template;
  const container = pod.spec.containers[0];
  const containerPorts = new Map<string, number>(container.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]));
  const args: string[] = container.args;
  const arg = (flag: string) => {
    const i = args.indexOf(flag);
    expect(i, flag).toBeGreaterThanOrEqual(0);
    return args[i + 1];
  };

  test('namespaced objects are in the waypoint namespace (the MeshConfig Role in istio-system)', () => {
    for (const o of all) {
      if (o.kind.startsWith('Cluster')) expect(o.metadata.namespace, o.kind).toBeUndefined();
      else expect(o.metadata.namespace, o.kind).toBe(o.kind === 'Role' || o.kind === 'RoleBinding' ? ISTIO_NAMESPACE : ns);
    }
  });

  test('selectors select the pods: Deployment, Service, PDB, topology spread; the HPA scales the Deployment', () => {
    const selector = deployment.spec.selector.matchLabels;
    expect(Object.keys(selector).length).toBeGreaterThan(0);
    expect(subset(selector, pod.metadata.labels)).toBe(true);
    expect(subset(one('Service').spec.selector, pod.metadata.labels)).toBe(true);
    expect(one('PodDisruptionBudget').spec).toEqual({ maxUnavailable: 1, selector: { matchLabels: selector } });
    for (const c of pod.spec.topologySpreadConstraints) expect(c.labelSelector.matchLabels).toEqual(selector);
    expect(pod.spec.topologySpreadConstraints.map((c: { topologyKey: string }) => c.topologyKey)).toEqual(['topology.kubernetes.io/zone', 'kubernetes.io/hostname']);
    const hpa = one('HorizontalPodAutoscaler');
    expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata.name });
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
    expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
    expect(deployment.spec.replicas, 'the HPA owns replicas').toBeUndefined();
    expect(deployment.spec.strategy.rollingUpdate).toEqual({ maxUnavailable: 0, maxSurge: 1 });
  });

  test("one name for the Gateway, its ServiceAccount (the pod's identity), Service, Deployment and the RBAC subjects", () => {
    const gateway = one('Gateway');
    expect(gateway.metadata.name).toBe(wp);
    expect(one('ServiceAccount').metadata.name).toBe(wp);
    expect(pod.spec.serviceAccountName).toBe(wp);
    expect(one('Service').metadata.name).toBe(wp);
    expect(deployment.metadata.name).toBe(wp);
    for (const b of [one('ClusterRoleBinding'), one('RoleBinding')]) expect(b.subjects).toEqual([{ kind: 'ServiceAccount', name: wp, namespace: ns }]);
    expect(one('ClusterRoleBinding').roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: one('ClusterRole').metadata.name });
    expect(one('RoleBinding').roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: one('Role').metadata.name });
    expect(one('ClusterRole').metadata.name).toBe(`node-waypoint:${ns}:${wp}`);
  });

  test('the pod is labelled as Istio labels its waypoints, and scraped on the metrics port', () => {
    expect(pod.metadata.labels).toMatchObject({
      'istio.io/dataplane-mode': 'none',
      'sidecar.istio.io/inject': 'false',
      'gateway.networking.k8s.io/gateway-name': wp,
      'service.istio.io/canonical-name': wp,
      'gateway.istio.io/managed': 'istio.io-mesh-controller',
    });
    expect(one('Service').metadata.labels?.['gateway.istio.io/managed']).toBe('istio.io-mesh-controller');
    const a = pod.metadata.annotations;
    expect(a['prometheus.io/scrape']).toBe('true');
    expect(a['prometheus.io/path']).toBe('/stats/prometheus');
    expect(Number(a['prometheus.io/port'])).toBe(containerPorts.get('metrics'));
    expect(arg('--admin'), 'the admin server (metrics) listens on the pod IP').toBe(`[::]:${containerPorts.get('metrics')}`);
  });

  test('the Service is PreferDualStack as Istio\'s waypoint Service, and every listener of the pod takes both families ([::], dual-stack)', () => {
    expect(one('Service').spec.ipFamilyPolicy).toBe('PreferDualStack');
    const servicePorts = new Map<string, number>(one('Service').spec.ports.map((p: { name: string; targetPort: number }) => [p.name, p.targetPort]));
    expect(arg('--hbone')).toBe(`[::]:${servicePorts.get('mesh')}`);
    expect(arg('--readiness')).toBe(`[::]:${servicePorts.get('status-port')}`);
    expect(arg('--admin')).toBe(`[::]:${servicePorts.get('metrics')}`);
  });

  test('the Gateway: istio-waypoint, listener mesh/15008/HBONE, the Service FQDN as its one Hostname address, unmanaged', () => {
    const gateway = one('Gateway');
    expect(gateway.metadata.labels?.['istio.io/waypoint-for']).toBe('service');
    expect(gateway.spec.gatewayClassName).toBe('istio-waypoint');
    expect(gateway.spec.listeners).toEqual([{ name: 'mesh', port: 15008, protocol: 'HBONE' }]);
    expect(gateway.spec.addresses).toEqual([{ type: 'Hostname', value: `${one('Service').metadata.name}.${ns}.svc.cluster.local` }]);
    expect(istioIsManaged(gateway.spec)).toBe(false);
    expect(istioIsManaged({ ...gateway.spec, addresses: undefined }), 'the same Gateway without addresses would get an Envoy waypoint').toBe(true);
  });

  test('Service ports: names and appProtocols as Istio gives its waypoint, each to a container port', () => {
    const ports = one('Service').spec.ports;
    expect(ports.map((p: { name: string; port: number; appProtocol: string }) => [p.name, p.port, p.appProtocol])).toEqual([
      ['status-port', 15021, 'tcp'],
      ['mesh', 15008, 'hbone'],
      ['metrics', 15020, 'http'],
    ]);
    for (const p of ports) expect(containerPorts.get(p.name), p.name).toBe(p.targetPort);
  });

  test('probes: readiness on the status port; startup and liveness elsewhere than readiness (istiod away never kills the pod)', () => {
    const status = containerPorts.get('status-port');
    expect(container.readinessProbe.httpGet).toEqual({ path: '/healthz/ready', port: status, scheme: 'HTTP' });
    for (const p of [container.livenessProbe, container.startupProbe]) {
      expect(p.httpGet.port).toBe(status);
      expect(p.httpGet.path).toBe('/healthz/live');
    }
  });

  test('the in-cluster contract: `run --cluster`, env from the downward API, the token and the root certificate where it reads them', () => {
    expect(args.slice(0, 2)).toEqual(['run', '--cluster']);
    const env = new Map<string, { value?: string; valueFrom?: { fieldRef: { fieldPath: string } } }>(container.env.map((e: { name: string }) => [e.name, e]));
    expect(Object.fromEntries(['POD_NAME', 'POD_NAMESPACE', 'INSTANCE_IP', 'SERVICE_ACCOUNT'].map((n) => [n, env.get(n)?.valueFrom?.fieldRef.fieldPath]))).toEqual({
      POD_NAME: 'metadata.name',
      POD_NAMESPACE: 'metadata.namespace',
      INSTANCE_IP: 'status.podIP',
      SERVICE_ACCOUNT: 'spec.serviceAccountName',
    });
    expect(env.get('CA_ADDR')?.value).toBe('istiod.istio-system.svc:15012');
    const volumes = new Map<string, Record<string, unknown>>(pod.spec.volumes.map((v: { name: string }) => [v.name, v]));
    for (const m of container.volumeMounts) expect(volumes.has(m.name), `mount ${m.name} has a volume`).toBe(true);
    const mountOf = (path: string) => container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === path);
    const token = volumes.get(mountOf('/var/run/secrets/tokens').name) as { projected: { sources: { serviceAccountToken: { audience: string; path: string } }[] } };
    expect(token.projected.sources[0].serviceAccountToken).toMatchObject({ audience: 'istio-ca', path: 'istio-token' });
    expect(volumes.get(mountOf('/var/run/secrets/istio').name)).toMatchObject({ configMap: { name: 'istio-ca-root-cert' } });
  });

  test('security: non-root numeric UID, read-only root, no escalation, no capabilities, RuntimeDefault seccomp; writes go to an emptyDir', () => {
    expect(container.securityContext).toMatchObject({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(Number.isInteger(container.securityContext.runAsUser) && container.securityContext.runAsUser > 0).toBe(true);
    const tmp = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === '/tmp');
    expect(pod.spec.volumes.find((v: { name: string }) => v.name === tmp?.name)?.emptyDir).toBeDefined();
  });

  test('resources: requests for CPU and memory, a memory limit; the grace period covers the drain delay, timeout and a margin', () => {
    expect(Object.keys(container.resources.requests).sort()).toEqual(['cpu', 'memory']);
    expect(container.resources.limits.memory).toBeDefined();
    const delayS = durationFlag(arg('--drain-delay')) / 1000;
    const timeoutS = durationFlag(arg('--drain-timeout')) / 1000;
    expect(delayS).toBe(5);
    expect(pod.spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(delayS + timeoutS + 3);
  });

  test('RBAC: read-only, exactly the watched kinds (cluster-wide), the istio ConfigMap by name in istio-system', () => {
    const granted = (rules: { apiGroups: string[]; resources: string[]; resourceNames?: string[]; verbs: string[] }[]) =>
      rules.flatMap((r) => {
        expect(r.verbs).toEqual(['get', 'list', 'watch']);
        return r.apiGroups.flatMap((g) => r.resources.map((res) => ({ group: g, resource: res, names: r.resourceNames })));
      });
    const want = (inNs: boolean) => WATCHED_KINDS.filter((k) => Boolean(k.namespace) === inNs).map((k) => ({ group: k.group, resource: k.plural, names: k.name === undefined ? undefined : [k.name] }));
    expect(granted(one('ClusterRole').rules)).toEqual(want(false));
    expect(granted(one('Role').rules)).toEqual(want(true));
    expect(granted(one('Role').rules)).toEqual([{ group: '', resource: 'configmaps', names: ['istio'] }]);
    for (const r of [...one('ClusterRole').rules, ...one('Role').rules]) expect(JSON.stringify(r)).not.toContain('*');
  });
});
