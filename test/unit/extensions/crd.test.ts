/**
 * deploy/crds/waypointfilter.yaml says what the waypoint accepts (src/extensions/schema.ts): the
 * same group, kind and served version, the same phases and match modes, and the same cross-field
 * rules (as CEL validations the API server applies before the waypoint sees an object).
 */
import fs from 'node:fs';
import { expect, test } from 'vitest';
import { parse } from 'yaml';
import { PHASES, WAYPOINT_FILTER_GROUP, WAYPOINT_FILTER_KIND } from '../../../src/extensions/index.ts';

const crd = parse(fs.readFileSync(new URL('../../../deploy/crds/waypointfilter.yaml', import.meta.url), 'utf8'));

test('group, kind, plural and the one served version', () => {
  expect(crd.spec.group).toBe(WAYPOINT_FILTER_GROUP);
  expect(crd.spec.names.kind).toBe(WAYPOINT_FILTER_KIND);
  expect(crd.metadata.name).toBe(`${crd.spec.names.plural}.${WAYPOINT_FILTER_GROUP}`);
  expect(crd.spec.versions.map((v: { name: string; served: boolean }) => [v.name, v.served])).toEqual([['v1alpha1', true]]);
});

test('the spec fields and their enums are those the waypoint validates', () => {
  const spec = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec;
  expect(Object.keys(spec.properties).sort()).toEqual(['config', 'filter', 'match', 'module', 'phase', 'priority', 'sha256', 'targetRefs']);
  expect(spec.properties.phase.enum).toEqual([...PHASES]);
  expect(spec.properties.match.items.properties.mode.enum).toEqual(['UNDEFINED', 'CLIENT', 'SERVER', 'CLIENT_AND_SERVER']);
  expect(spec.properties.targetRefs.items.properties.kind.enum).toEqual(['Gateway', 'Service', 'ServiceEntry', 'HTTPRoute', 'GRPCRoute']);
  expect(spec['x-kubernetes-validations'].map((v: { rule: string }) => v.rule)).toEqual(['has(self.module) != has(self.filter)', '!has(self.sha256) || has(self.module)']);
});
