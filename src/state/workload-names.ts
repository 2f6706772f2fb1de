/**
 * Names Istio derives for a workload: the owning controller (istio/istio pkg/kube/util.go
 * `GetDeployMetaFromPod`) and the canonical service name/revision (istio/istio pkg/kube/labels/labels.go
 * `CanonicalService`). They feed telemetry labels and the `k8s.<type>.name` baggage keys.
 */
import type { WorkloadType } from './types.ts';

/** Owner reference as found in `metadata.ownerReferences[]`. */
export interface OwnerRef {
  readonly kind: string;
  readonly name: string;
  readonly controller?: boolean | null;
}

/** Job names created by a CronJob end in `-<8 to 10 digit timestamp>`. */
const CRONJOB_JOB_NAME = /^(.+)-\d{8,10}$/;

/**
 * Workload name and type of a Pod, from its controlling owner (`controller: true`, else the first):
 * - ReplicaSet `name-<pod-template-hash>` ⇒ `name`, `deployment` (the hash comes from the
 *   `pod-template-hash` label; without that label the last `-segment` is dropped);
 * - Job `name-<timestamp>` ⇒ `name`, `cronjob`; other Jobs ⇒ job name, `job`;
 * - any other owner (StatefulSet, DaemonSet, ...) ⇒ owner name, `pod`;
 * - no owner ⇒ pod name, `pod`.
 */
export function workloadNameAndType(
  podName: string,
  labels: Readonly<Record<string, string>>,
  owners: readonly OwnerRef[],
): { name: string; type: WorkloadType } {
  const owner = owners.find((o) => o.controller) ?? owners[0];
  if (!owner || !owner.name) return { name: podName, type: 'pod' };
  if (owner.kind === 'ReplicaSet') {
    const hash = labels['pod-template-hash'];
    if (hash && owner.name.endsWith(`-${hash}`)) {
      return { name: owner.name.slice(0, -(hash.length + 1)), type: 'deployment' };
    }
    const dash = owner.name.lastIndexOf('-');
    if (!hash && dash > 0) return { name: owner.name.slice(0, dash), type: 'deployment' };
    return { name: owner.name, type: 'pod' };
  }
  if (owner.kind === 'Job') {
    const m = CRONJOB_JOB_NAME.exec(owner.name);
    return m ? { name: m[1], type: 'cronjob' } : { name: owner.name, type: 'job' };
  }
  return { name: owner.name, type: 'pod' };
}

/**
 * Canonical service of a workload: name from `service.istio.io/canonical-name` →
 * `app.kubernetes.io/name` → `app` → `workloadName`; revision from
 * `service.istio.io/canonical-revision` → `app.kubernetes.io/version` → `version` → `latest`.
 */
export function canonicalService(
  labels: Readonly<Record<string, string>>,
  workloadName: string,
): { name: string; revision: string } {
  return {
    name: labels['service.istio.io/canonical-name'] || labels['app.kubernetes.io/name'] || labels.app || workloadName,
    revision:
      labels['service.istio.io/canonical-revision'] || labels['app.kubernetes.io/version'] || labels.version || 'latest',
  };
}
