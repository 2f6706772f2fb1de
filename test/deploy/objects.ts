/**
 * The deploy manifests as the tests read them: the YAML files of deploy/ parsed, `waypoint
 * generate`'s output parsed, and the schema class (kubernetes-models, Gateway API models) of each
 * kind the manifests use.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import { ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { Gateway } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/Gateway';

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const BASE_DIR = path.join(ROOT, 'deploy', 'base');
export const OVERLAY_DIR = path.join(ROOT, 'deploy', 'overlays', 'example');

/** A Kubernetes object as parsed from YAML. */
export type K8s = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }; [k: string]: any };

/** Schema model of each apiVersion/kind the manifests may contain: `new Model(obj).validate()` throws on a schema error. */
export const MODELS: Record<string, new (o: never) => { validate(): void }> = {
  'v1/ServiceAccount': ServiceAccount,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'rbac.authorization.k8s.io/v1/ClusterRole': ClusterRole,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': ClusterRoleBinding,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'gateway.networking.k8s.io/v1/Gateway': Gateway,
};

/** Validate `o` against its kind's schema; throws naming the object and the schema error. */
export function validate(o: K8s): void {
  const Model = MODELS[`${o.apiVersion}/${o.kind}`];
  if (!Model) throw new Error(`no schema for ${o.apiVersion} ${o.kind}`);
  try {
    new Model(structuredClone(o) as never).validate();
  } catch (err) {
    throw new Error(`${o.kind}/${o.metadata?.name}: ${(err as Error).message}`);
  }
}

/** Every document of a YAML stream; a YAML error fails. */
export function parseStream(text: string, where: string): K8s[] {
  return parseAllDocuments(text).map((d, i) => {
    if (d.errors.length) throw new Error(`${where} document ${i + 1}: ${d.errors[0].message}`);
    return d.toJS() as K8s;
  });
}

/** A kustomization.yaml of `dir`, parsed. */
export function kustomization(dir: string): { resources?: string[]; transformers?: string[] } {
  return parseStream(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8'), dir)[0] as never;
}

/** The objects of deploy/base, in the order its kustomization.yaml lists the files. */
export function baseObjects(): K8s[] {
  return (kustomization(BASE_DIR).resources ?? []).flatMap((f) => parseStream(fs.readFileSync(path.join(BASE_DIR, f), 'utf8'), f));
}

/** `kind/namespace/name` of an object. */
export function keyOf(o: K8s): string {
  return `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}
