/**
 * Diff two V8 heap snapshots (.heapsnapshot, e.g. the idle flow's with BENCH_GC=1
 * BENCH_HEAP_SNAPSHOTS=<dir>) by constructor: objects and self bytes added between them, divided by
 * N (the idle tunnels) when given, so a row reads "per tunnel".
 *
 *   node bench/heap-diff.ts before.heapsnapshot after.heapsnapshot [N] [rows]
 *
 * Rows are `type:name` for objects and native nodes (Node's C++ wrappers read e.g.
 * `native:Node / Http2Stream`), closures with where they are defined (`file:line`), function
 * contexts with the variables they hold (`context{a,b}`), and the node type alone for strings.
 */
import fs from 'node:fs';

interface Group {
  count: number;
  bytes: number;
}

function summarize(file: string): Map<string, Group> {
  const snap = JSON.parse(fs.readFileSync(file, 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]]; location_fields?: string[] } };
    nodes: number[];
    edges: number[];
    locations?: number[];
    strings: string[];
  };
  const meta = snap.snapshot.meta;
  const types = meta.node_types[0];
  const edgeTypes = meta.edge_types[0];
  const stride = meta.node_fields.length;
  const eStride = meta.edge_fields.length;
  const iType = meta.node_fields.indexOf('type');
  const iName = meta.node_fields.indexOf('name');
  const iSize = meta.node_fields.indexOf('self_size');
  const iEdges = meta.node_fields.indexOf('edge_count');
  const { nodes, edges, strings } = snap;
  const firstEdge = new Uint32Array(nodes.length / stride + 1);
  for (let i = 0, e = 0; i < nodes.length; i += stride) {
    firstEdge[i / stride] = e;
    e += nodes[i + iEdges] * eStride;
  }
  firstEdge[nodes.length / stride] = edges.length;
  const edgesOf = function* (node: number): Generator<{ type: string; name: string; to: number }> {
    for (let e = firstEdge[node / stride]; e < firstEdge[node / stride + 1]; e += eStride) {
      const type = edgeTypes[edges[e]];
      const name = type === 'element' || type === 'hidden' ? String(edges[e + 1]) : strings[edges[e + 1]];
      yield { type, name, to: edges[e + 2] };
    }
  };
  const nameOf = (node: number) => strings[nodes[node + iName]];
  // Closures: where the function is defined (script:line), from the snapshot's locations.
  const where = new Map<number, string>();
  const scriptName = new Map<number, string>();
  const loc = snap.locations ?? [];
  const lf = meta.location_fields ?? ['object_index', 'script_id', 'line', 'column'];
  for (let i = 0; i < loc.length; i += lf.length) {
    const node = loc[i];
    let script = scriptName.get(loc[i + 1]);
    if (script === undefined) {
      for (const e of edgesOf(node)) {
        if (e.name !== 'shared') continue;
        for (const f of edgesOf(e.to)) if (f.name === 'script') script = nameOf(f.to).replace(/^.*\/(src|filters|node_modules|bench)\//, '$1/');
      }
      if (script) scriptName.set(loc[i + 1], script);
    }
    where.set(node, `${script ?? `script ${loc[i + 1]}`}:${loc[i + 2] + 1}`);
  }
  const out = new Map<string, Group>();
  for (let i = 0; i < nodes.length; i += stride) {
    const type = types[nodes[i + iType]];
    const name = nameOf(i);
    let key = type;
    if (type === 'closure') key = `closure:${name || '(anonymous)'} @ ${where.get(i) ?? '?'}`;
    else if (type === 'object' && name === 'system / Context') {
      const vars: string[] = [];
      for (const e of edgesOf(i)) if (e.type === 'context') vars.push(e.name);
      key = `context{${vars.join(',')}}`;
    } else if (type === 'object' || type === 'native' || type === 'hidden' || type === 'array' || type === 'code') key = `${type}:${name}`;
    if (key.length > 110) key = `${key.slice(0, 107)}...`;
    const g = out.get(key) ?? { count: 0, bytes: 0 };
    g.count++;
    g.bytes += nodes[i + iSize];
    out.set(key, g);
  }
  return out;
}

const [beforeFile, afterFile, nRaw, rowsRaw] = process.argv.slice(2);
if (!beforeFile || !afterFile) {
  process.stderr.write('usage: node bench/heap-diff.ts before.heapsnapshot after.heapsnapshot [N] [rows]\n');
  process.exit(2);
}
const n = Number(nRaw ?? 1) || 1;
const rows = Number(rowsRaw ?? 40) || 40;
const a = summarize(beforeFile);
const b = summarize(afterFile);
const diff: { key: string; count: number; bytes: number }[] = [];
let total = 0;
let totalCount = 0;
for (const key of new Set([...a.keys(), ...b.keys()])) {
  const x = a.get(key) ?? { count: 0, bytes: 0 };
  const y = b.get(key) ?? { count: 0, bytes: 0 };
  diff.push({ key, count: y.count - x.count, bytes: y.bytes - x.bytes });
  total += y.bytes - x.bytes;
  totalCount += y.count - x.count;
}
diff.sort((p, q) => Math.abs(q.bytes) - Math.abs(p.bytes));
const per = n > 1 ? ` per ${n}` : '';
process.stdout.write(`${'objects' + per}`.padStart(16) + `${'bytes' + per}`.padStart(16) + '  constructor\n');
const fmt = (v: number) => (v / n).toFixed(n > 1 ? 2 : 0);
for (const d of diff.slice(0, rows)) process.stdout.write(`${fmt(d.count).padStart(16)}${fmt(d.bytes).padStart(16)}  ${d.key}\n`);
process.stdout.write(`${fmt(totalCount).padStart(16)}${fmt(total).padStart(16)}  (all)\n`);
