/**
 * Build {@link Workload}s from Pods, WorkloadEntries and ServiceEntry inline endpoints, following
 * istiod's ambient workload builders (istio/istio pilot/pkg/serviceregistry/ambient/workloads.go).
 */
import { log } from '../util/index.ts';
import { servesWorkloads, tunnelProtocol, usesWaypoint } from './attachment.ts';
import { normalizeIp } from './ip.ts';
import { PodSchema, WorkloadEntrySchema, type ServiceEntryDoc } from './schemas.ts';
import type { SourceObject } from './source.ts';
import type { Workload, WaypointIdentity } from './types.ts';
import { parseAs } from './validate.ts';
import { canonicalService, workloadNameAndType } from './workload-names.ts';

type Labels = Readonly<Record<string, string>>;

/** What every workload builder needs besides the object itself. */
export interface WorkloadContext {
  readonly clusterId: string;
  readonly trustDomain: string;
  readonly waypoint: WaypointIdentity;
  /** Labels of a namespace (`{}` when the input has no Namespace object for it). */
  namespaceLabels(namespace: string): Labels;
}

const LABEL_NETWORK = 'topology.istio.io/network';
const LABEL_REGION = 'topology.kubernetes.io/region';
const LABEL_ZONE = 'topology.kubernetes.io/zone';

type Fields = Omit<
  Workload,
  'trustDomain' | 'identity' | 'canonicalName' | 'canonicalRevision' | 'clusterId' | 'tunnelProtocol' | 'servedByThisWaypoint'
> & { readonly canonicalLabels: Labels };

/** Fill the fields every kind of workload derives the same way. */
function finish(f: Fields, ctx: WorkloadContext): Workload {
  const nsLabels = ctx.namespaceLabels(f.namespace);
  const canonical = canonicalService(f.canonicalLabels, f.workloadName);
  const { canonicalLabels: _, ...rest } = f;
  return {
    ...rest,
    trustDomain: ctx.trustDomain,
    identity: `spiffe://${ctx.trustDomain}/ns/${f.namespace}/sa/${f.serviceAccount}`,
    canonicalName: canonical.name,
    canonicalRevision: canonical.revision,
    clusterId: ctx.clusterId,
    tunnelProtocol: tunnelProtocol(f.labels, nsLabels, f.annotations),
    servedByThisWaypoint: servesWorkloads(ctx.waypoint) && usesWaypoint(f.labels, f.namespace, nsLabels, ctx.waypoint),
  };
}

/** `region/zone/subzone` (WorkloadEntry `locality`), else the topology labels. */
function locality(text: string | null | undefined, labels: Labels): { region: string; zone: string } {
  if (text) {
    const [region = '', zone = ''] = text.split('/');
    return { region, zone };
  }
  return { region: labels[LABEL_REGION] ?? '', zone: labels[LABEL_ZONE] ?? '' };
}

/**
 * Workload of a Pod. Addresses from `status.podIPs` (else `status.podIP`); healthy unless the
 * `Ready` condition is `False` or the Pod is being deleted; service account defaults to `default`.
 * Returns undefined (like istiod) for a Pod without an IP or in phase Succeeded/Failed.
 * @throws ConfigError for malformed fields (bad IPs, ports, labels).
 */
export function podWorkload(obj: SourceObject, ctx: WorkloadContext): Workload | undefined {
  const pod = parseAs(PodSchema, obj);
  const status = pod.status ?? {};
  if (status.phase === 'Succeeded' || status.phase === 'Failed') {
    log.debug({ object: obj.ref, phase: status.phase }, 'mesh: skipping terminated Pod');
    return undefined;
  }
  const addresses = unique([...(status.podIPs ?? []).map((p) => p.ip), ...(status.podIP ? [status.podIP] : [])]);
  if (addresses.length === 0) {
    log.warn({ file: obj.file, object: obj.ref }, 'mesh: Pod has no status.podIP; it cannot be an endpoint');
    return undefined;
  }
  const labels = pod.metadata.labels ?? {};
  const spec = pod.spec ?? {};
  const owner = workloadNameAndType(obj.name, labels, pod.metadata.ownerReferences ?? []);
  const ready = (status.conditions ?? []).find((c) => c.type === 'Ready');
  const namedPorts: Record<string, number> = {};
  for (const c of spec.containers ?? []) {
    for (const p of c.ports ?? []) if (p.name && !(p.name in namedPorts)) namedPorts[p.name] = p.containerPort;
  }
  return finish(
    {
      uid: `${ctx.clusterId}//Pod/${obj.namespace}/${obj.name}`,
      kind: 'Pod',
      name: obj.name,
      namespace: obj.namespace,
      addresses,
      serviceAccount: spec.serviceAccountName || spec.serviceAccount || 'default',
      labels,
      annotations: pod.metadata.annotations ?? {},
      workloadName: owner.name,
      workloadType: owner.type,
      network: labels[LABEL_NETWORK] ?? '',
      node: spec.nodeName ?? '',
      ...locality(undefined, labels),
      healthy: ready?.status !== 'False' && (pod.metadata.deletionTimestamp ?? undefined) === undefined,
      namedPorts,
      canonicalLabels: labels,
    },
    ctx,
  );
}

/**
 * Workload of a WorkloadEntry: `spec.labels` merged with `metadata.labels` (metadata wins, as
 * istiod does), `spec.ports` as named ports, always healthy, type `pod`.
 * @throws ConfigError for a non-IP `spec.address` or malformed fields.
 */
export function workloadEntryWorkload(obj: SourceObject, ctx: WorkloadContext): Workload {
  const we = parseAs(WorkloadEntrySchema, obj);
  const spec = we.spec ?? {};
  const labels = { ...(spec.labels ?? {}), ...(we.metadata.labels ?? {}) };
  return finish(
    {
      uid: `${ctx.clusterId}/networking.istio.io/WorkloadEntry/${obj.namespace}/${obj.name}`,
      kind: 'WorkloadEntry',
      name: obj.name,
      namespace: obj.namespace,
      addresses: spec.address ? [normalizeIp(spec.address)!] : [],
      serviceAccount: spec.serviceAccount || 'default',
      labels,
      annotations: we.metadata.annotations ?? {},
      workloadName: obj.name,
      workloadType: 'pod',
      network: spec.network || labels[LABEL_NETWORK] || '',
      node: '',
      ...locality(spec.locality, labels),
      healthy: true,
      namedPorts: { ...(spec.ports ?? {}) },
      canonicalLabels: labels,
    },
    ctx,
  );
}

/** DNS resolutions allow hostnames as endpoint addresses; those never become IP workloads. */
const DNS_RESOLUTIONS = new Set(['DNS', 'DNS_ROUND_ROBIN', 'DYNAMIC_DNS']);

/**
 * Workloads of a ServiceEntry's inline `spec.endpoints` (kind `WorkloadEntry`, named after the
 * ServiceEntry, uid `<cluster>/networking.istio.io/ServiceEntry/<ns>/<name>/<address>`).
 * Hostname addresses are skipped for DNS resolutions.
 * @throws ConfigError for a non-IP endpoint address when the resolution is not DNS-based.
 */
export function serviceEntryWorkloads(obj: SourceObject, se: ServiceEntryDoc, ctx: WorkloadContext): Workload[] {
  const spec = se.spec;
  const seLabels = se.metadata.labels ?? {};
  const dns = DNS_RESOLUTIONS.has((spec.resolution ?? '').toUpperCase());
  const out: Workload[] = [];
  (spec.endpoints ?? []).forEach((ep, i) => {
    const ip = normalizeIp(ep.address);
    if (ip === undefined) {
      if (dns) {
        log.debug({ object: obj.ref, address: ep.address }, 'mesh: ServiceEntry endpoint is a hostname; not an IP workload');
        return;
      }
      throw obj.fail(
        `${JSON.stringify(ep.address)} is not an IP address (hostnames need resolution: DNS)`,
        ['spec', 'endpoints', i, 'address'],
      );
    }
    const labels = ep.labels ?? {};
    out.push(
      finish(
        {
          uid: `${ctx.clusterId}/networking.istio.io/ServiceEntry/${obj.namespace}/${obj.name}/${ip}`,
          kind: 'WorkloadEntry',
          name: obj.name,
          namespace: obj.namespace,
          addresses: [ip],
          serviceAccount: ep.serviceAccount || 'default',
          labels,
          annotations: {},
          workloadName: obj.name,
          workloadType: 'pod',
          network: ep.network || '',
          node: '',
          ...locality(ep.locality, labels),
          healthy: true,
          namedPorts: { ...(ep.ports ?? {}) },
          canonicalLabels: seLabels,
        },
        ctx,
      ),
    );
  });
  return out;
}

function unique(ips: readonly string[]): string[] {
  return [...new Set(ips.map((ip) => normalizeIp(ip)!))];
}
