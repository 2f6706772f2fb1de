/**
 * The `baggage` header ztunnel puts on its HBONE CONNECTs to describe the source workload
 * (istio/ztunnel src/baggage.rs `baggage_header_val`, ztunnel ≥ 1.30: keys with empty values are
 * omitted): `k8s.cluster.name`, `k8s.namespace.name`, `k8s.<type>.name`, `service.name`,
 * `service.version`, `cloud.region`, `cloud.availability_zone`, joined as `k=v` with `,`.
 */
import type { Workload } from '../state/index.ts';

/** Baggage value describing `w`. */
export function formatBaggage(w: Workload): string {
  const pairs: [string, string][] = [
    ['k8s.cluster.name', w.clusterId],
    ['k8s.namespace.name', w.namespace],
    [`k8s.${w.workloadType}.name`, w.workloadName],
    ['service.name', w.canonicalName],
    ['service.version', w.canonicalRevision],
    ['cloud.region', w.region],
    ['cloud.availability_zone', w.zone],
  ];
  return pairs
    .filter(([, v]) => v !== '')
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}
