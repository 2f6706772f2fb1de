/**
 * Micro benchmark of the AuthorizationPolicy engine (src/authz/): decision time per request for a
 * mesh holding 10, 1 000 and 10 000 AuthorizationPolicies of which the same handful apply to the
 * target (2 on the waypoint's Gateway, 3 on the target Service). The rest are attached to other
 * served services, to other namespaces' services, to other Gateways, or are selector (ztunnel)
 * policies. The figure must not grow with the policies that do not apply: evaluators are compiled
 * per target once per snapshot and the data path is one Map lookup plus the applicable rules.
 *
 *   node --expose-gc bench/micro/authz.ts   (BENCH_MICRO_ITERATIONS, default 300000 per case and
 *                                           round; BENCH_MICRO_ROUNDS, default 5; --expose-gc adds
 *                                           heap bytes per decision)
 *
 * Also reported: compile time of the whole snapshot's policies, and path normalization cost.
 */
import { stringify } from 'yaml';

import { compileAuthz, type CompiledAuthz } from '../../src/authz/compile.ts';
import { headersFromRaw } from '../../src/authz/headers.ts';
import type { RequestAttributes } from '../../src/authz/types.ts';
import { compileMesh } from '../../src/state/compile.ts';
import type { MeshSnapshot, Target } from '../../src/state/types.ts';

const ITERATIONS = Number(process.env.BENCH_MICRO_ITERATIONS ?? 300_000);
const SIZES = [10, 1_000, 10_000];
const OTHER_SERVICES = 200;
const gc = (globalThis as { gc?: () => void }).gc;

const gw = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'waypoint' }];
const ap = (name: string, ns: string, spec: object) => ({ apiVersion: 'security.istio.io/v1', kind: 'AuthorizationPolicy', metadata: { name, namespace: ns }, spec });

/** The handful that applies to httpbin: realistic rules, the allowing one last in id order. */
function applying(): object[] {
  return [
    ap('gw-deny-admin', 'foo', { targetRefs: gw, action: 'DENY', rules: [{ to: [{ operation: { paths: ['/admin', '/admin/*'] } }] }] }),
    ap('gw-audit', 'foo', { targetRefs: gw, action: 'AUDIT', rules: [{ when: [{ key: 'request.headers[x-audit]', values: ['1'] }] }] }),
    ap('svc-deny-bar', 'foo', {
      targetRefs: [{ kind: 'Service', name: 'httpbin' }],
      action: 'DENY',
      rules: [{ from: [{ source: { namespaces: ['bar'], notIpBlocks: ['127.244.0.0/16'] } }] }],
    }),
    ap('svc-allow-a', 'foo', {
      targetRefs: [{ kind: 'Service', name: 'httpbin' }],
      rules: [{ from: [{ source: { principals: ['cluster.local/ns/shop/sa/*'] } }], to: [{ operation: { methods: ['POST'], paths: ['/orders/*'] } }] }],
    }),
    ap('svc-allow-b', 'foo', {
      targetRefs: [{ kind: 'Service', name: 'httpbin' }],
      rules: [
        { from: [{ source: { requestPrincipals: ['https://issuer.example.com/*'] } }], to: [{ operation: { paths: ['/api/*'] } }] },
        { from: [{ source: { principals: ['cluster.local/ns/foo/sa/sleep'] } }], to: [{ operation: { methods: ['GET', 'HEAD'], hosts: ['httpbin.foo*'] } }] },
      ],
    }),
  ];
}

/** `n` policies that do not apply to httpbin, of four kinds. */
function notApplying(n: number): object[] {
  const out: object[] = [];
  for (let i = 0; i < n; i++) {
    const rules = [{ from: [{ source: { principals: [`cluster.local/ns/ns-${i}/sa/sa-${i}`] } }], to: [{ operation: { paths: [`/p${i}/*`], methods: ['GET'] } }] }];
    switch (i % 4) {
      case 0: // another served service on this waypoint
        out.push(ap(`svc-${i}`, 'foo', { targetRefs: [{ kind: 'Service', name: `svc-${i % OTHER_SERVICES}` }], rules }));
        break;
      case 1: // a service of another namespace
        out.push(ap(`remote-${i}`, `ns-${i % 50}`, { targetRefs: [{ kind: 'Service', name: 'httpbin' }], rules }));
        break;
      case 2: // another waypoint
        out.push(ap(`other-gw-${i}`, 'foo', { targetRefs: [{ ...gw[0], name: 'other-waypoint' }], rules }));
        break;
      default: // ztunnel's
        out.push(ap(`sel-${i}`, `ns-${i % 50}`, { selector: { matchLabels: { app: `app-${i}` } }, action: 'DENY', rules }));
    }
  }
  return out;
}

function mesh(total: number): MeshSnapshot {
  const objects: object[] = [
    {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'Gateway',
      metadata: { name: 'waypoint', namespace: 'foo' },
      spec: { gatewayClassName: 'istio-waypoint' },
    },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'foo', labels: { 'istio.io/use-waypoint': 'waypoint' } } },
    { apiVersion: 'v1', kind: 'Service', metadata: { name: 'httpbin', namespace: 'foo' }, spec: { clusterIP: '127.96.0.10', ports: [{ name: 'http', port: 8000 }] } },
  ];
  for (let i = 0; i < OTHER_SERVICES; i++) {
    objects.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: `svc-${i}`, namespace: 'foo' },
      spec: { clusterIP: `127.97.${i >> 8}.${i & 255}`, ports: [{ name: 'http', port: 80 }] },
    });
  }
  objects.push(...applying(), ...notApplying(total - 5));
  return compileMesh({ text: objects.map((o) => stringify(o)).join('---\n'), file: `bench-${total}.yaml` });
}

const requests: { label: string; attrs: RequestAttributes }[] = [
  {
    label: 'GET allowed by the last rule',
    attrs: {
      principal: 'spiffe://cluster.local/ns/foo/sa/sleep',
      sourceIp: '127.244.1.5',
      destinationIp: '127.96.0.10',
      destinationPort: 8000,
      host: 'httpbin.foo:8000',
      method: 'GET',
      path: '/get',
      headers: headersFromRaw(['host', 'httpbin.foo:8000', 'user-agent', 'curl/8.5.0', 'accept', '*/*']),
    },
  },
  {
    label: 'denied by a DENY rule',
    attrs: {
      principal: 'spiffe://cluster.local/ns/foo/sa/sleep',
      sourceIp: '127.244.1.5',
      destinationIp: '127.96.0.10',
      destinationPort: 8000,
      host: 'httpbin.foo:8000',
      method: 'GET',
      path: '/admin/users',
      headers: headersFromRaw(['host', 'httpbin.foo:8000']),
    },
  },
  {
    label: 'no ALLOW rule matches (default deny)',
    attrs: {
      principal: 'spiffe://cluster.local/ns/other/sa/x',
      sourceIp: '127.244.1.9',
      destinationIp: '127.96.0.10',
      destinationPort: 8000,
      host: 'httpbin.foo:8000',
      method: 'DELETE',
      path: '/get',
      headers: headersFromRaw([]),
    },
  },
];

const ROUNDS = Number(process.env.BENCH_MICRO_ROUNDS ?? 5);

/** One timed loop: ns per call, and heap bytes per call when run with --expose-gc. */
function timeLoop(fn: () => unknown): { ns: number; bytes: number | undefined } {
  for (let i = 0; i < 20_000; i++) fn();
  gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < ITERATIONS; i++) fn();
  const ns = Number(process.hrtime.bigint() - t0) / ITERATIONS;
  const bytes = gc ? Math.max(0, process.memoryUsage().heapUsed - heap0) / ITERATIONS : undefined;
  return { ns, bytes };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const fmt = (ns: number, bytes: number | undefined) => `${ns.toFixed(0).padStart(6)} ns${bytes === undefined ? '' : `  ${bytes.toFixed(0).padStart(4)} B/op`}`;

interface Case {
  readonly label: string;
  readonly run: () => unknown;
  readonly ns: number[];
  readonly bytes: number[];
}

process.stdout.write(
  `authz decision time: median of ${ROUNDS} interleaved rounds of ${ITERATIONS.toLocaleString('en-US')} iterations, Node ${process.versions.node}${gc ? ', heap bytes per op' : ''}\n`,
);
const sizes = SIZES.map((total) => {
  const snap = mesh(total);
  const c0 = process.hrtime.bigint();
  const authz: CompiledAuthz = compileAuthz(snap);
  const compileMs = Number(process.hrtime.bigint() - c0) / 1e6;
  const target: Target = snap.resolveTarget('127.96.0.10', 8000)!;
  const cases: Case[] = requests.map(({ label, attrs }) => ({
    label: `${label} (${authz.forTarget(target).http.evaluate(attrs).decision})`,
    run: () => authz.forTarget(target).http.evaluate(attrs),
    ns: [],
    bytes: [],
  }));
  const tcpAttrs = requests[0].attrs;
  cases.push({ label: `TCP chain (${authz.forTarget(target).tcp.evaluate(tcpAttrs).decision})`, run: () => authz.forTarget(target).tcp.evaluate(tcpAttrs), ns: [], bytes: [] });
  return { total, compileMs, applied: authz.forTarget(target).http.policies.length, cases };
});

for (let round = 0; round < ROUNDS; round++) {
  for (const size of sizes) {
    for (const c of size.cases) {
      const r = timeLoop(c.run);
      c.ns.push(r.ns);
      if (r.bytes !== undefined) c.bytes.push(r.bytes);
    }
  }
}

for (const size of sizes) {
  process.stdout.write(`\n${size.total.toLocaleString('en-US')} policies in the mesh, ${size.applied} apply to the target (compiled in ${size.compileMs.toFixed(0)} ms)\n`);
  for (const c of size.cases) {
    process.stdout.write(`  ${`forTarget + evaluate: ${c.label}`.padEnd(66)} ${fmt(median(c.ns), c.bytes.length ? median(c.bytes) : undefined)}\n`);
  }
}

const snap = mesh(10);
const authz = compileAuthz(snap);
process.stdout.write('\npath normalization (BASE)\n');
for (const p of ['/api/v1/items?page=2', '/public/../admin/%61b']) {
  const rs = Array.from({ length: ROUNDS }, () => timeLoop(() => authz.normalizePath(p)));
  process.stdout.write(`  ${JSON.stringify(p).padEnd(66)} ${fmt(median(rs.map((r) => r.ns)), gc ? median(rs.map((r) => r.bytes!)) : undefined)}\n`);
}
