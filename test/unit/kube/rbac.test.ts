/**
 * The least-privilege RBAC of the cluster mode is rendered from the table the watchers start
 * from (WATCHED_KINDS), and README "Mesh state from the Kubernetes API" shows exactly that: its
 * table of watched kinds and its RBAC manifest are checked against the code here.
 */
import fs from 'node:fs';
import { describe, expect, test } from 'vitest';
import { Document, isMap, isSeq } from 'yaml';

import { apiVersionOf, clusterRoleRules, namespaceRoleRules, rbacObjects, resourceName, WATCHED_KINDS } from '../../../src/kube/index.ts';
import { resourceOf } from '../../helpers/fake-kube.ts';

const README = fs.readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
const START = README.indexOf('### Mesh state from the Kubernetes API');
const SECTION = README.slice(START, README.indexOf('\n### ', START + 1));

/** The manifest as README shows it: each rule on one line. */
function renderRbac(): string {
  return rbacObjects({ name: 'node-waypoint', serviceAccount: { namespace: 'demo', name: 'waypoint' } })
    .map((o) => {
      const doc = new Document(o);
      const rules = doc.get('rules', true);
      if (isSeq(rules)) for (const r of rules.items) if (isMap(r)) r.flow = true;
      return doc.toString({ lineWidth: 0 });
    })
    .join('---\n');
}

/** The table of watched kinds as README shows it. */
function renderKinds(): string {
  const scope = (k: (typeof WATCHED_KINDS)[number]) => (k.namespace ? `\`${k.namespace}/${k.name}\` only` : k.namespaced ? 'all namespaces' : 'cluster');
  return WATCHED_KINDS.map((k) => `| \`${k.kind}\` | \`${apiVersionOf(k)}\` | ${scope(k)} | ${k.why} |`).join('\n');
}

describe('RBAC from WATCHED_KINDS', () => {
  test('the ClusterRole reads (get/list/watch) every kind watched across namespaces, nothing else', () => {
    const rules = clusterRoleRules();
    const granted = rules.flatMap((r) => r.resources.map((res) => `${res}.${r.apiGroups[0]}`));
    const wanted = WATCHED_KINDS.filter((k) => !k.namespace).map((k) => `${k.plural}.${k.group}`);
    expect(granted.sort()).toEqual(wanted.sort());
    for (const r of rules) {
      expect(r.verbs).toEqual(['get', 'list', 'watch']);
      expect(r.apiGroups).toHaveLength(1);
      expect(JSON.stringify(r)).not.toContain('*');
    }
  });

  test('the istio ConfigMap is granted by name, in istio-system only (a Role, not the ClusterRole)', () => {
    expect(clusterRoleRules().some((r) => r.resources.includes('configmaps'))).toBe(false);
    expect(namespaceRoleRules()).toEqual([{ namespace: 'istio-system', rules: [{ apiGroups: [''], resources: ['configmaps'], resourceNames: ['istio'], verbs: ['get', 'list', 'watch'] }] }]);
    expect(rbacObjects({ name: 'x', serviceAccount: { namespace: 'demo', name: 'waypoint' } }).map((o) => `${String(o.kind)}`)).toEqual(['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);
  });

  test('resource names in the table are the API server’s plurals', () => {
    for (const k of WATCHED_KINDS) expect(resourceName(k)).toBe(resourceOf(apiVersionOf(k), k.kind));
  });

  test('README shows the table and the manifest the code renders', () => {
    expect(SECTION.length).toBeGreaterThan(100);
    expect(SECTION).toContain(renderKinds());
    expect(SECTION).toContain(`\`\`\`yaml\n${renderRbac()}\`\`\``);
  });
});
