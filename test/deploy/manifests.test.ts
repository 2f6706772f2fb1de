/**
 * deploy/ is what src/deploy generates: deploy/base equals `npm run deploy:base`'s output (the
 * objects of `waypoint generate --namespace default`), each kustomization lists every file of its
 * folder, every object of the base, of `generate` and of the example overlay passes its
 * Kubernetes / Gateway API schema, and the overlay renders to what `generate --namespace demo`
 * prints (where kubectl with kustomize v5 is installed).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, test } from 'vitest';
import { baseOptions, generateYaml, kustomizeBase, waypointManifests } from '../../src/deploy/index.ts';
import { VERSION } from '../../src/util/index.ts';
import { BASE_DIR, OVERLAY_DIR, baseObjects, keyOf, kustomization, parseStream, validate, type K8s } from './objects.ts';

const generated = (o: Partial<Parameters<typeof waypointManifests>[0]> = {}) =>
  parseStream(generateYaml({ ...baseOptions(VERSION), ...o }, VERSION), 'generate');

describe('deploy/base', () => {
  test('is exactly what `npm run deploy:base` writes (regenerate it after changing src/deploy)', () => {
    const want = kustomizeBase(VERSION);
    expect(fs.readdirSync(BASE_DIR).sort()).toEqual([...want.keys()].sort());
    for (const [file, text] of want) expect(fs.readFileSync(path.join(BASE_DIR, file), 'utf8'), file).toBe(text);
  });

  test('holds the objects `waypoint generate` prints for the base defaults, in the same order', () => {
    expect(baseObjects()).toEqual(generated());
    expect(baseObjects().map((o) => o.metadata.namespace ?? '')).toContain('default');
  });

  test('kustomization.yaml lists every other file of the folder', () => {
    const files = fs.readdirSync(BASE_DIR).filter((f) => f !== 'kustomization.yaml');
    expect([...(kustomization(BASE_DIR).resources ?? [])].sort()).toEqual(files.sort());
  });
});

describe('waypoint generate', () => {
  test('its `Apply with:` comment repeats every flag that differs from the defaults (else it prints other objects)', () => {
    const applyWith = (o: Partial<Parameters<typeof waypointManifests>[0]>) => /^# Apply with: (.*)$/m.exec(generateYaml({ ...baseOptions(VERSION), ...o }, VERSION))?.[1];
    expect(applyWith({ namespace: 'demo' })).toBe('waypoint generate --namespace demo | kubectl apply -f -');
    expect(applyWith({ namespace: 'shop', name: 'edge', image: 'reg/x:1', clusterDomain: 'corp.local' })).toBe(
      'waypoint generate --namespace shop --name edge --image reg/x:1 --cluster-domain corp.local | kubectl apply -f -',
    );
  });
});

describe('schemas (kubernetes-models, @kubernetes-models/gateway-api)', () => {
  const cases: { name: string; objects: () => K8s[] }[] = [
    { name: 'deploy/base', objects: baseObjects },
    { name: 'generate --namespace shop --name edge --image registry.example.com/wp:1', objects: () => generated({ namespace: 'shop', name: 'edge', image: 'registry.example.com/wp:1' }) },
  ];
  test.each(cases)('every object of $name is valid for its kind', ({ objects }) => {
    const all = objects();
    expect(all.map((o) => o.kind).sort()).toEqual(
      ['ClusterRole', 'ClusterRoleBinding', 'Deployment', 'Gateway', 'HorizontalPodAutoscaler', 'PodDisruptionBudget', 'Role', 'RoleBinding', 'Service', 'ServiceAccount'],
    );
    for (const o of all) validate(o);
  });

  test('the validation is not vacuous: schema errors and unknown kinds are refused', () => {
    const [deployment] = baseObjects().filter((o) => o.kind === 'Deployment');
    const noSelector = structuredClone(deployment);
    delete noSelector.spec.selector;
    expect(() => validate(noSelector)).toThrow(/selector/);
    const badPort = structuredClone(deployment);
    badPort.spec.template.spec.containers[0].ports[0].containerPort = 'mesh';
    expect(() => validate(badPort)).toThrow(/containerPort/);
    const [gateway] = baseObjects().filter((o) => o.kind === 'Gateway');
    expect(() => validate({ ...gateway, spec: { listeners: gateway.spec.listeners } })).toThrow(/gatewayClassName/);
    expect(() => validate({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' } })).toThrow(/no schema/);
  });

  test('generate refuses names Kubernetes would refuse', () => {
    expect(() => waypointManifests({ ...baseOptions(VERSION), namespace: 'Bad_NS' })).toThrow(/DNS-1123/);
    expect(() => waypointManifests({ ...baseOptions(VERSION), name: '1waypoint' })).toThrow(/DNS-1035/);
    expect(() => waypointManifests({ ...baseOptions(VERSION), name: 'none' })).toThrow(/reserved/);
    expect(() => waypointManifests({ ...baseOptions(VERSION), image: 'a b' })).toThrow(/image/);
  });
});

describe('deploy/overlays/example', () => {
  test('kustomization.yaml builds on the base and lists every other file of the folder', () => {
    const k = kustomization(OVERLAY_DIR);
    expect(k.resources).toEqual(['../../base']);
    const files = fs.readdirSync(OVERLAY_DIR).filter((f) => f !== 'kustomization.yaml');
    expect([...(k.transformers ?? [])].sort()).toEqual(files.sort());
    const transformers = parseStream(fs.readFileSync(path.join(OVERLAY_DIR, 'set-namespace.yaml'), 'utf8'), 'set-namespace.yaml');
    expect(transformers.map((t) => t.kind)).toEqual(['NamespaceTransformer', 'PatchTransformer', 'ReplacementTransformer']);
    expect(transformers[0].metadata.namespace).toBe('demo');
  });

  // kubectl (with kustomize v5) is not on every machine: where it is, the overlay is rendered for real.
  const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });
  const kustomizeV5 = kubectl.status === 0 && /Kustomize Version: v5\./.test(kubectl.stdout);
  test.skipIf(!kustomizeV5)('renders (kubectl kustomize) to the objects of `waypoint generate --namespace demo`, each valid', () => {
    const r = spawnSync('kubectl', ['kustomize', OVERLAY_DIR], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    const rendered = new Map(parseStream(r.stdout, 'kubectl kustomize').map((o) => [keyOf(o), o]));
    const want = new Map(generated({ namespace: 'demo' }).map((o) => [keyOf(o), o]));
    expect([...rendered.keys()].sort()).toEqual([...want.keys()].sort());
    for (const [key, o] of want) expect(rendered.get(key), key).toEqual(o);
    for (const o of rendered.values()) validate(o);
  });
});
