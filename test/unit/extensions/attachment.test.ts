/**
 * The WaypointFilter part (src/extensions): validation naming the resource and field, the
 * attachment table (Gateway, Service, route rule, ExtensionRef; `match` ports and mode; phase and
 * priority order), filter instances kept across snapshots until their config changes, and where
 * the phase slots go in a chain.
 */
import { describe, expect, test } from 'vitest';
import { Registry } from 'prom-client';
import { EXTENSION_SLOTS, extensionsFor, WaypointExtensions, withExtensionSlots } from '../../../src/extensions/index.ts';
import { FilterStatus, type Filter, type FilterFactory } from '../../../src/pipeline/index.ts';
import { ROUTES } from '../../../src/routing/index.ts';
import { MeshStore } from '../../../src/state/index.ts';
import type { MeshSnapshot, Target } from '../../../src/state/index.ts';
import { meshText, namespace, route, service, usesWaypoint, waypointFilter, waypointGateway, type Doc } from '../../helpers/mesh.ts';
import { thrown } from '../../helpers/thrown.ts';

/** `test.tag`: a filter that remembers its config; `create` calls counted. */
const created: { tag: string }[] = [];
const tag: FilterFactory<{ tag: string }> = {
  name: 'test.tag',
  parseConfig(raw) {
    const t = (raw as { tag?: unknown } | undefined)?.tag;
    if (typeof t !== 'string') throw new Error('tag must be a string');
    return { tag: t };
  },
  create(config) {
    created.push(config);
    return { name: `tag:${config.tag}`, onRequestHeaders: () => FilterStatus.Continue };
  },
};

const base = [
  waypointGateway('foo'),
  namespace('foo', usesWaypoint()),
  service({ name: 'a', namespace: 'foo', vip: '10.96.0.1', ports: [{ name: 'http', port: 80 }, { name: 'admin', port: 9000 }] }),
  service({ name: 'b', namespace: 'foo', vip: '10.96.0.2', ports: [{ name: 'http', port: 80 }] }),
];

const wf = (name: string, spec: object) => waypointFilter(name, { filter: 'test.tag', config: { tag: name }, ...spec });
const toA = [{ kind: 'Service', name: 'a' }];
const toGateway = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }];

function compile(...docs: (Doc | string)[]): { snap: MeshSnapshot; ext: WaypointExtensions } {
  const ext = new WaypointExtensions({ filters: [tag as FilterFactory<unknown>], metrics: new Registry(), phaseTimeoutMs: 0 });
  const store = MeshStore.fromText(meshText(...base, ...docs), { file: 'mesh.yaml', parts: [ROUTES, ext.part] });
  return { snap: store.current, ext };
}

const target = (snap: MeshSnapshot, ip: string, port: number) => snap.resolveTarget(ip, port) as Target;
/** The filter names per phase for a target. */
const names = (snap: MeshSnapshot, t: Target) => extensionsFor(snap).forTarget(t).map((l) => l.all.map((a) => a.filter.name));

describe('validation: the update is refused naming the WaypointFilter and the field', () => {
  test.each([
    [{ filter: 'test.tag', module: './x.ts' }, 'spec', /exactly one of module/],
    [{ targetRefs: [{ kind: 'Deployment', name: 'x' }], filter: 'test.tag', config: { tag: 'x' } }, 'spec.targetRefs[0].kind', /cannot be a target/],
    [{ targetRefs: [{ kind: 'Service', name: 'a', namespace: 'bar' }], filter: 'test.tag', config: { tag: 'x' } }, 'spec.targetRefs[0].namespace', /cross-namespace/],
    [{ targetRefs: [{ kind: 'Service', name: 'a', sectionName: 'x' }], filter: 'test.tag', config: { tag: 'x' } }, 'spec.targetRefs[0].sectionName', /route/],
    [{ filter: 'test.tag', config: { tag: 'x' }, phase: 'LATE' }, 'spec.phase', /must be one of AUTHN, AUTHZ, STATS/],
    [{ filter: 'test.tag', config: { tag: 'x' }, sha256: 'ab' }, 'spec.sha256', /64 lower-case hex/],
    // `sha256: 000…0` unquoted in YAML.
    [{ module: './x.ts', sha256: 0 }, 'spec.sha256', /must be a string of 64 hex digits, got the number 0: quote it \(sha256: "…"\), as YAML reads an all-digit value as a number/],
    [{ filter: 'istio.authz' }, 'spec.filter', /unknown filter "istio.authz" \(a WaypointFilter may attach: test.tag\)/],
    [{ filter: 'test.tag', config: { tag: 7 } }, 'spec.config', /tag must be a string/],
  ])('%j', (spec, field, message) => {
    const err = thrown(() => compile(waypointFilter('bad', spec)));
    expect(String(err)).toMatch(new RegExp(`^mesh.yaml:\\d+: document 4: WaypointFilter/foo/bad: field ${field.replace(/[[\].]/g, '\\$&')}: `));
    expect(String(err)).toMatch(message);
  });

  test('a version the CRD does not serve', () => {
    const doc = { ...waypointFilter('v', { filter: 'test.tag', config: { tag: 'v' } }), apiVersion: 'extensions.node-waypoint.dev/v1' };
    const err = thrown(() => compile(doc));
    expect(String(err)).toMatch(/WaypointFilter\/foo\/v: field apiVersion: apiVersion extensions.node-waypoint.dev\/v1 is not served/);
  });
});

describe('attachment', () => {
  test('a Service attachment applies to that service only; a Gateway attachment to every target', () => {
    const { snap } = compile(wf('svc', { targetRefs: toA }), wf('gw', { targetRefs: toGateway }));
    expect(names(snap, target(snap, '10.96.0.1', 80))[3]).toEqual(['tag:gw', 'tag:svc']);
    expect(names(snap, target(snap, '10.96.0.2', 80))[3]).toEqual(['tag:gw']);
  });

  test('phase, then priority (higher first), then name', () => {
    const { snap } = compile(
      wf('z-default', { targetRefs: toA }),
      wf('b-authz', { targetRefs: toA, phase: 'AUTHZ', priority: 1 }),
      wf('a-authz', { targetRefs: toA, phase: 'AUTHZ', priority: 1 }),
      wf('c-authz', { targetRefs: toA, phase: 'AUTHZ', priority: 5 }),
      wf('stats', { targetRefs: toA, phase: 'STATS' }),
      wf('authn', { targetRefs: toA, phase: 'AUTHN', priority: -3 }),
    );
    expect(names(snap, target(snap, '10.96.0.1', 80))).toEqual([['tag:authn'], ['tag:c-authz', 'tag:a-authz', 'tag:b-authz'], ['tag:stats'], ['tag:z-default']]);
  });

  test('match: ports narrow by service port; mode CLIENT never applies at a waypoint', () => {
    const { snap } = compile(
      wf('admin-only', { targetRefs: toA, match: [{ ports: [{ number: 9000 }] }] }),
      wf('client', { targetRefs: toA, match: [{ mode: 'CLIENT' }] }),
      wf('gw-admin', { targetRefs: toGateway, match: [{ mode: 'SERVER', ports: [{ number: 9000 }] }] }),
    );
    expect(names(snap, target(snap, '10.96.0.1', 80))[3]).toEqual([]);
    expect(names(snap, target(snap, '10.96.0.1', 9000))[3]).toEqual(['tag:admin-only', 'tag:gw-admin']);
    expect(names(snap, target(snap, '10.96.0.2', 80))[3]).toEqual([]);
  });

  test('route rules: by sectionName, the whole route without one, and by ExtensionRef (a missing one answers 500)', () => {
    const rules = route('r', 'foo', {
      parentRefs: [{ group: '', kind: 'Service', name: 'b', port: 80 }],
      rules: [
        { name: 'one', matches: [{ path: { value: '/one' } }], backendRefs: [{ name: 'b', port: 80 }] },
        { name: 'two', matches: [{ path: { value: '/two' } }], backendRefs: [{ name: 'b', port: 80 }], filters: [{ type: 'ExtensionRef', extensionRef: { group: 'extensions.node-waypoint.dev', kind: 'WaypointFilter', name: 'by-ref' } }] },
        { name: 'three', backendRefs: [{ name: 'b', port: 80 }], filters: [{ type: 'ExtensionRef', extensionRef: { group: 'extensions.node-waypoint.dev', kind: 'WaypointFilter', name: 'missing' } }] },
      ],
    });
    const { snap } = compile(
      rules,
      wf('rule-one', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r', sectionName: 'one' }] }),
      wf('whole', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }], priority: 9 }),
      wf('by-ref', {}),
    );
    const [one, two, three] = snap.part(ROUTES).rulesOf('HTTPRoute/foo/r')!;
    const of = (r: typeof one) => extensionsFor(snap).forRule(r)?.all.map((a) => a.filter.name);
    expect(of(one)).toEqual(['tag:whole', 'tag:rule-one']);
    expect(of(two)).toEqual(['tag:whole', 'tag:by-ref']);
    expect(of(three)).toEqual(['tag:whole', 'WaypointFilter/foo/missing']);
    // Route attachments add nothing to the service's own phases.
    expect(names(snap, target(snap, '10.96.0.2', 80))[3]).toEqual([]);
  });

  test('a service not served by this waypoint, another Gateway, a missing target: attached to nothing', () => {
    const { snap } = compile(
      service({ name: 'c', namespace: 'foo', vip: '10.96.0.3', ports: [{ name: 'http', port: 80 }], labels: { 'istio.io/use-waypoint': 'none' } }),
      wf('c', { targetRefs: [{ kind: 'Service', name: 'c' }] }),
      wf('other-gw', { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'other' }] }),
      wf('ghost', { targetRefs: [{ kind: 'Service', name: 'ghost' }] }),
    );
    expect(names(snap, target(snap, '10.96.0.1', 80)).flat()).toEqual([]);
    expect(extensionsFor(snap).filters).toEqual(['WaypointFilter/foo/c', 'WaypointFilter/foo/other-gw', 'WaypointFilter/foo/ghost']);
  });
});

test('instances: kept across snapshots while resource, attachment and config are unchanged; created again when the config changes', async () => {
  const ext = new WaypointExtensions({ filters: [tag as FilterFactory<unknown>], metrics: new Registry(), phaseTimeoutMs: 0 });
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-ext-'));
  const file = path.join(dir, 'mesh.yaml');
  try {
    fs.writeFileSync(file, meshText(...base, wf('keep', { targetRefs: toA })));
    const store = await MeshStore.open({ meshFile: file, parts: [ROUTES, ext.part] });
    ext.bind(store);
    const first = extensionsFor(store.current).forTarget(target(store.current, '10.96.0.1', 80))[3].all[0].filter;
    const n = created.length;
    fs.writeFileSync(file, meshText(...base, wf('keep', { targetRefs: toA }), service({ name: 'd', namespace: 'foo', vip: '10.96.0.4', ports: [{ name: 'http', port: 80 }] })));
    await store.reload();
    expect(store.current.version).toBe(2);
    expect(extensionsFor(store.current).forTarget(target(store.current, '10.96.0.1', 80))[3].all[0].filter).toBe(first);
    expect(created.length).toBe(n);
    fs.writeFileSync(file, meshText(...base, waypointFilter('keep', { filter: 'test.tag', targetRefs: toA, config: { tag: 'changed' } })));
    await store.reload();
    const next = extensionsFor(store.current).forTarget(target(store.current, '10.96.0.1', 80))[3].all[0].filter as Filter;
    expect(next).not.toBe(first);
    expect(next.name).toBe('tag:changed');
    store.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

describe('phase slots in a chain', () => {
  const f = (name: string): Filter => ({ name });
  const order = (filters: Filter[]) => withExtensionSlots(filters, EXTENSION_SLOTS.map(f)).map((x) => x.name);

  test("Istio's chain: AUTHN and AUTHZ before istio.authz, STATS before istio.stats, the last before the router", () => {
    expect(order([f('log'), f('istio.peer_metadata'), f('istio.authz'), f('istio.stats'), f('router')])).toEqual([
      'log',
      'istio.peer_metadata',
      ...EXTENSION_SLOTS.slice(0, 2),
      'istio.authz',
      EXTENSION_SLOTS[2],
      'istio.stats',
      EXTENSION_SLOTS[3],
      'router',
    ]);
  });

  test('without istio.authz or istio.stats: in phase order before the router', () => {
    expect(order([f('log'), f('router')])).toEqual(['log', ...EXTENSION_SLOTS, 'router']);
    expect(order([f('istio.stats'), f('router')])).toEqual([...EXTENSION_SLOTS.slice(0, 3), 'istio.stats', EXTENSION_SLOTS[3], 'router']);
  });
});
