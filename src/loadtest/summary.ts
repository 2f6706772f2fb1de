/**
 * The few lines a load test prints when it is done: what ran, throughput, latency corrected and
 * uncorrected, errors by kind, and the waypoint's CPU and memory.
 */
import { micros } from './charts.ts';
import type { LoadtestReport } from './result.ts';

const n = (v: number | null | undefined, digits = 0) => (v === null || v === undefined || !Number.isFinite(v) ? 'n/a' : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));

export function formatSummary(r: LoadtestReport): string {
  const x = r.loadtest;
  const s = x.settings;
  const w = x.window;
  const loop = s.rate === null ? 'closed loop (saturation)' : `open loop at ${n(s.rate)} req/s`;
  const out = [
    `loadtest: ${x.transport}, ${s.protocol}, ${loop}, ${s.connections} connection${s.connections === 1 ? '' : 's'} × ${s.streams} stream${s.streams === 1 ? '' : 's'}${r.Labels ? ` (${r.Labels})` : ''}`,
    `  measured ${n(w.seconds, 2)} s: ${n(w.completed)} requests, ${n(w.ok)} ok, ${n(w.errors)} errors; ${n(x.throughput.achievedRps, 1)} req/s${w.interrupted ? ' (interrupted)' : ''}`,
  ];
  const heads = ['p50', 'p90', 'p99', 'p99.9', 'max'];
  const row = (name: string, l: typeof x.latencyUs.corrected) => `  ${name.padEnd(34)}${[l.p50, l.p90, l.p99, l.p999, l.max].map((v) => micros(v).padStart(10)).join('')}`;
  out.push(`  ${'latency'.padEnd(34)}${heads.map((h) => h.padStart(10)).join('')}`);
  out.push(row('corrected (from when due)', x.latencyUs.corrected));
  out.push(row('uncorrected (from when sent)', x.latencyUs.uncorrected));
  const errs = Object.entries(x.errors);
  if (errs.length > 0) out.push(`  errors: ${errs.map(([k, v]) => `${k} ${n(v)}`).join(', ')}`, ...x.errorSamples.slice(0, 3).map((e) => `    ${e}`));
  const wp = x.waypoint;
  if (wp) {
    out.push(
      `  waypoint (${wp.source}): ${n(wp.cores, 3)} cores, ${n(wp.vcpuPer1000, 3)} vCPU per 1000 req/s, ${n(wp.usPerRequest, 1)} µs CPU per request; RSS ${n(wp.rssStartMiB, 1)} → peak ${n(wp.rssPeakMiB, 1)} → ${n(wp.rssEndMiB, 1)} MiB`,
    );
  }
  for (const p of x.prometheus) out.push(`  metrics ${p.url}: ${p.error ?? `${p.diff?.counters.length ?? 0} counters moved`}`);
  return `${out.join('\n')}\n`;
}
