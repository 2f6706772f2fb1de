/**
 * `waypoint loadtest compare a.json b.json`: two runs side by side (e.g. node-waypoint and Envoy's
 * waypoint at the same rate), every figure as B ÷ A, as a text table and as an HTML page with both
 * runs' charts overlaid.
 */
import { esc, micros, ratioChart } from './charts.ts';
import { overTime, page, percentileChart, runName, table, timeChart } from './html.ts';
import { incompleteOf, type LoadtestReport } from './result.ts';

export interface ComparisonRow {
  readonly metric: string;
  readonly a: number | null;
  readonly b: number | null;
  /** B ÷ A, or null when either is missing or A is 0. */
  readonly ratio: number | null;
  /** Which way is better, for the verdict column; 'none': not ranked (throughput at the same fixed rate is the rate). */
  readonly better: 'lower' | 'higher' | 'none';
  readonly format: 'us' | 'number' | 'percent';
}

export interface Comparison {
  readonly a: string;
  readonly b: string;
  readonly rows: readonly ComparisonRow[];
  /** Settings that differ: the two runs did not carry the same load. */
  readonly differences: readonly string[];
  /** Runs that did not go to their planned end (interrupted): their figures cover less. */
  readonly warnings: readonly string[];
}

/**
 * A result that measured nothing (Ctrl-C during the warm-up, no request answered) has no figures
 * to compare: its zeros would read as "better".
 * @throws Error naming the file and why.
 */
export function checkComparable(r: LoadtestReport, file: string): void {
  if (r.loadtest.window.completed === 0) throw new Error(`${file}: ${incompleteOf(r) ?? 'no request was measured'}; there is nothing to compare`);
}

function row(metric: string, a: number | null | undefined, b: number | null | undefined, better: ComparisonRow['better'], format: ComparisonRow['format'] = 'number'): ComparisonRow {
  const x = a ?? null;
  const y = b ?? null;
  return { metric, a: x, b: y, ratio: x !== null && y !== null && x !== 0 ? Math.round((y / x) * 1000) / 1000 : null, better, format };
}

export function compareReports(a: LoadtestReport, b: LoadtestReport): Comparison {
  const A = a.loadtest;
  const B = b.loadtest;
  const errPct = (r: LoadtestReport) => (r.loadtest.window.completed > 0 ? (100 * r.loadtest.window.errors) / r.loadtest.window.completed : null);
  const rows: ComparisonRow[] = [
    // At the same fixed rate both achieve the rate: a 0.1 % difference is the schedule's, not a ranking.
    row('throughput req/s', A.throughput.achievedRps, B.throughput.achievedRps, A.settings.rate !== null && A.settings.rate === B.settings.rate ? 'none' : 'higher'),
    row('p50 latency (corrected)', A.latencyUs.corrected.p50, B.latencyUs.corrected.p50, 'lower', 'us'),
    row('p90 latency (corrected)', A.latencyUs.corrected.p90, B.latencyUs.corrected.p90, 'lower', 'us'),
    row('p99 latency (corrected)', A.latencyUs.corrected.p99, B.latencyUs.corrected.p99, 'lower', 'us'),
    row('p99.9 latency (corrected)', A.latencyUs.corrected.p999, B.latencyUs.corrected.p999, 'lower', 'us'),
    row('max latency (corrected)', A.latencyUs.corrected.max, B.latencyUs.corrected.max, 'lower', 'us'),
    row('p99 latency (uncorrected)', A.latencyUs.uncorrected.p99, B.latencyUs.uncorrected.p99, 'lower', 'us'),
    row('errors %', errPct(a), errPct(b), 'lower', 'percent'),
    row('waypoint CPU cores', A.waypoint?.cores, B.waypoint?.cores, 'lower'),
    row('waypoint vCPU per 1000 req/s', A.waypoint?.vcpuPer1000, B.waypoint?.vcpuPer1000, 'lower'),
    row('waypoint CPU µs per request', A.waypoint?.usPerRequest, B.waypoint?.usPerRequest, 'lower'),
    row('waypoint peak RSS MiB', A.waypoint?.rssPeakMiB, B.waypoint?.rssPeakMiB, 'lower'),
  ];
  const differences: string[] = [];
  const same = (what: string, x: unknown, y: unknown) => {
    if (JSON.stringify(x) !== JSON.stringify(y)) differences.push(`${what}: ${JSON.stringify(x)} vs ${JSON.stringify(y)}`);
  };
  same('protocol', A.settings.protocol, B.settings.protocol);
  const rate = (r: number | null) => (r === null ? 'closed loop' : `${r} req/s`);
  if (A.settings.rate !== B.settings.rate) differences.push(`rate: ${rate(A.settings.rate)} vs ${rate(B.settings.rate)}`);
  same('connections × streams', `${A.settings.connections}×${A.settings.streams}`, `${B.settings.connections}×${B.settings.streams}`);
  same('body bytes', A.settings.bodyBytes, B.settings.bodyBytes);
  same('request', `${A.settings.method} ${A.settings.path}`, `${B.settings.method} ${B.settings.path}`);
  const warnings = (
    [
      ['A', a],
      ['B', b],
    ] as const
  ).flatMap(([name, r]) => {
    const why = incompleteOf(r);
    return why ? [`${name} (${runName(r)}) is not a full run: ${why}; its figures cover ${r.loadtest.window.seconds} s and ${r.loadtest.window.completed} requests`] : [];
  });
  return { a: runName(a), b: runName(b), rows, differences, warnings };
}

function cell(v: number | null, f: ComparisonRow['format']): string {
  if (v === null || !Number.isFinite(v)) return 'n/a';
  if (f === 'us') return micros(v);
  if (f === 'percent') return `${+v.toFixed(3)} %`;
  return v >= 100 ? Math.round(v).toLocaleString('en-US') : `${+v.toPrecision(4)}`;
}

/** Differences within this fraction are run-to-run noise: "same", not better or worse. */
const SAME_WITHIN = 0.01;

/** B better / B worse / same; undefined when not ranked. */
function better(r: ComparisonRow): boolean | 'same' | undefined {
  if (r.ratio === null || r.better === 'none') return undefined;
  if (Math.abs(r.ratio - 1) <= SAME_WITHIN) return 'same';
  return r.better === 'lower' ? r.ratio < 1 : r.ratio > 1;
}

function verdict(r: ComparisonRow): string {
  const b = better(r);
  return b === undefined ? '' : b === 'same' ? 'same' : b ? 'B better' : 'B worse';
}

/** The comparison as a text table (what `compare` prints). */
export function formatComparison(c: Comparison): string {
  const head = ['', 'A', 'B', 'B ÷ A', ''];
  const rows = c.rows.map((r) => [r.metric, cell(r.a, r.format), cell(r.b, r.format), r.ratio === null ? 'n/a' : `${r.ratio.toFixed(3)}×`, verdict(r)]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((x, i) => (i === 0 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join('  ').trimEnd();
  const out = [`A: ${c.a}`, `B: ${c.b}`, ...c.warnings.map((w) => `WARNING: ${w}`), '', line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)];
  if (c.differences.length > 0) out.push('', 'Not the same load (compare with care):', ...c.differences.map((d) => `  ${d}`));
  return `${out.join('\n')}\n`;
}

/** The comparison as one HTML page: ratio bars, then both runs' curves overlaid. */
export function renderCompare(a: LoadtestReport, b: LoadtestReport, c: Comparison): string {
  const A = a.loadtest;
  const B = b.loadtest;
  const parts: string[] = [];
  parts.push(`<h1>Load-test comparison</h1><p class="sub">A: ${esc(c.a)} (${esc(a.StartTime)})<br>B: ${esc(c.b)} (${esc(b.StartTime)})</p>`);
  for (const w of c.warnings) parts.push(`<div class="warn">${esc(w)}</div>`);
  if (c.differences.length > 0) parts.push(`<div class="warn">Not the same load: ${esc(c.differences.join('; '))}</div>`);
  parts.push(ratioChart('chart-ratios', 'B ÷ A (green: B better, red: B worse)', c.rows.map((r) => ({ label: r.metric, value: r.ratio, text: r.ratio === null ? 'n/a' : `${r.ratio.toFixed(2)}×`, better: ((b) => (b === 'same' ? undefined : b))(better(r)) }))));
  parts.push(table(['', 'A', 'B', 'B ÷ A', ''], c.rows.map((r) => [r.metric, cell(r.a, r.format), cell(r.b, r.format), r.ratio === null ? 'n/a' : `${r.ratio.toFixed(3)}×`, verdict(r)])));
  parts.push(
    percentileChart('Latency by percentile (corrected)', [
      { name: `A: ${c.a}`, points: A.percentileCurve.corrected },
      { name: `B: ${c.b}`, points: B.percentileCurve.corrected, dashed: true },
    ]),
    timeChart('chart-throughput', 'Throughput over time', 'requests per second', [
      { name: `A: ${c.a}`, points: overTime(A.timeline, (s) => s.rps) },
      { name: `B: ${c.b}`, points: overTime(B.timeline, (s) => s.rps), dashed: true },
    ]),
  );
  if (A.waypoint || B.waypoint) {
    parts.push(
      timeChart('chart-cpu', 'Waypoint CPU', 'cores', [
        { name: `A: ${c.a}`, points: overTime(A.waypoint?.series ?? [], (p) => p.cores) },
        { name: `B: ${c.b}`, points: overTime(B.waypoint?.series ?? [], (p) => p.cores), dashed: true },
      ]),
    );
  }
  return page('Load-test comparison', parts.join('\n'), [a, b]);
}
