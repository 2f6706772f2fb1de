/**
 * The HTML report of a load test: one self-contained file (inline CSS, SVG charts drawn at
 * generation time by charts.ts, a few lines of script for the hover read-out, and the JSON result
 * itself embedded), readable offline and attachable to an issue.
 */
import { esc, lineChart, micros, shortNumber, type Series } from './charts.ts';
import type { LoadtestReport } from './result.ts';

const CSS = `
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#666;margin:0 0 16px}table{border-collapse:collapse;margin:6px 0}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
td:first-child,th:first-child{text-align:left}th{background:#f6f6f6}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:150px}
.card b{display:block;font-size:20px}.card span{color:#666;font-size:12px}
.warn{background:#fff4e5;border:1px solid #f0b36b;border-radius:6px;padding:8px 12px;margin:10px 0}
figure.chart{margin:14px 0}figcaption{font-weight:600;margin-bottom:2px}
svg .grid{stroke:#eee}svg .axis{stroke:#888}svg .tick,svg .legend{font-size:11px;fill:#444}
svg .label{font-size:12px;fill:#333}svg .series{fill:none;stroke-width:2}svg .readout{font-size:12px;fill:#000}
svg .empty{fill:#999}svg .bar{fill:#aab}svg .bar.worse{fill:#e8a0a0}svg .bar.better{fill:#9cc9a3}
details{margin:6px 0}code{background:#f4f4f4;padding:0 3px}
`;

/** Hover read-out of the nearest point; marks the page ready (the headless-browser test reads it). */
const SCRIPT = `
(() => {
  const data = JSON.parse(document.getElementById('loadtest-data').textContent);
  const charts = document.querySelectorAll('figure.chart svg');
  for (const svg of charts) {
    const readout = svg.querySelector('text.readout');
    const series = Array.from(svg.querySelectorAll('[data-points]')).map((p) => ({ name: p.getAttribute('data-series'), pts: JSON.parse(p.getAttribute('data-points')) }));
    svg.addEventListener('mousemove', (ev) => {
      const r = svg.getBoundingClientRect();
      const vb = svg.viewBox.baseVal;
      const mx = ((ev.clientX - r.left) * vb.width) / r.width;
      const my = ((ev.clientY - r.top) * vb.height) / r.height;
      let best;
      let bd = Infinity;
      for (const s of series) for (const p of s.pts) {
        const d = (p[0] - mx) ** 2 + (p[1] - my) ** 2;
        if (d < bd) { bd = d; best = [s.name, p]; }
      }
      if (best && readout) readout.textContent = best[0] + ': ' + best[1][2] + ' \\u2192 ' + best[1][3];
    });
    svg.addEventListener('mouseleave', () => { if (readout) readout.textContent = ''; });
  }
  document.body.dataset.charts = String(charts.length);
  document.body.dataset.schema = String(Array.isArray(data) ? data.map((d) => d.loadtest.schema).join(',') : data.loadtest.schema);
  document.body.dataset.ready = '1';
})();
`;

/** A whole page around `body`; `data` is embedded as JSON (`#loadtest-data`). */
export function page(title: string, body: string, data: unknown): string {
  // `<` escaped so no string inside the JSON can close the script element.
  const json = JSON.stringify(data).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${esc(title)}</title><style>${CSS}</style></head>
<body>
${body}
<script type="application/json" id="loadtest-data">${json}</script>
<script>${SCRIPT}</script>
</body></html>
`;
}

export function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  return `<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>${rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('')}</table>`;
}

const card = (value: string, what: string) => `<div class="card"><b>${esc(value)}</b><span>${esc(what)}</span></div>`;

/** A one-line name of a run: label, or protocol and transport. */
export function runName(r: LoadtestReport): string {
  const x = r.loadtest;
  return r.Labels || `${x.settings.protocol} ${x.transport}`;
}

/** A latency-by-percentile chart (HdrHistogram's 1/(1-p) axis). */
export function percentileChart(title: string, series: Series[]): string {
  return lineChart({ id: 'chart-percentiles', title, xLabel: 'percentile', yLabel: 'latency', xKind: 'nines', yLog: true, yFormat: micros, series });
}

/** A chart over the measured window (x in seconds). */
export function timeChart(id: string, title: string, yLabel: string, series: Series[], y: { log?: boolean; format?: (v: number) => string } = {}): string {
  return lineChart({ id, title, xLabel: 'seconds into the measured window', yLabel, xKind: 'linear', yLog: y.log, yFormat: y.format, series });
}

/** [seconds, value] points of a time series in ms. */
export function overTime<T extends { readonly tMs: number }>(points: readonly T[], value: (p: T, i: number) => number): [number, number][] {
  return points.map((p, i) => [p.tMs / 1000, value(p, i)]);
}

/** The charts of one run (each `<figure class="chart" id="chart-…">`). */
export function runCharts(r: LoadtestReport): string[] {
  const x = r.loadtest;
  const answered = x.timeline.filter((s) => s.ok > 0);
  const out = [
    percentileChart('Latency by percentile (corrected for coordinated omission, and not)', [
      { name: 'corrected (from when due)', points: x.percentileCurve.corrected },
      { name: 'uncorrected (from when sent)', points: x.percentileCurve.uncorrected, dashed: true },
    ]),
    timeChart(
      'chart-latency-time',
      'Latency over time (corrected, per interval)',
      'latency',
      [
        { name: 'p50', points: overTime(answered, (s) => s.p50Us) },
        { name: 'p99', points: overTime(answered, (s) => s.p99Us) },
        { name: 'max', points: overTime(answered, (s) => s.maxUs), dashed: true },
      ],
      { log: true, format: micros },
    ),
    timeChart('chart-throughput', 'Throughput over time', 'requests per second', [
      { name: 'answered / s', points: overTime(x.timeline, (s) => s.rps) },
      { name: 'errors / s', points: overTime(x.timeline, (s, i) => s.errors / Math.max(1e-3, (s.tMs - (x.timeline[i - 1]?.tMs ?? 0)) / 1000)) },
    ]),
  ];
  const w = x.waypoint;
  if (w) {
    out.push(
      timeChart('chart-cpu', `Waypoint CPU (${w.source})`, 'cores', [{ name: 'CPU cores', points: overTime(w.series, (p) => p.cores) }], { format: (v) => `${+v.toPrecision(3)}` }),
      timeChart('chart-rss', `Waypoint memory (${w.source})`, 'RSS MiB', [{ name: 'RSS MiB', points: overTime(w.series, (p) => p.rssMiB) }]),
    );
  }
  return out;
}

const n = (v: number | null | undefined, digits = 0) => (v === null || v === undefined || !Number.isFinite(v) ? 'n/a' : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));

/** The HTML report of one run. */
export function renderReport(r: LoadtestReport): string {
  const x = r.loadtest;
  const s = x.settings;
  const c = x.latencyUs.corrected;
  const u = x.latencyUs.uncorrected;
  const w = x.waypoint;
  const parts: string[] = [];
  parts.push(`<h1>Load test: ${esc(runName(r))}</h1>`);
  parts.push(`<p class="sub">${esc(x.transport)} · ${esc(s.protocol)} · ${esc(r.StartTime)} · ${esc(x.tool)}</p>`);
  if (x.window.interrupted) parts.push('<div class="warn">Interrupted before the planned end: the figures cover the part that ran.</div>');
  if (x.window.errors > 0) parts.push(`<div class="warn">${n(x.window.errors)} of ${n(x.window.completed)} requests failed: ${esc(Object.entries(x.errors).map(([k, v]) => `${k} ${v}`).join(', '))}</div>`);
  parts.push('<div class="cards">');
  parts.push(card(`${n(x.throughput.achievedRps, 1)} req/s`, s.rate === null ? 'closed loop (saturation)' : `of ${n(s.rate)} req/s requested`));
  parts.push(card(micros(c.p50), 'p50 latency (corrected)'));
  parts.push(card(micros(c.p99), 'p99 latency (corrected)'));
  parts.push(card(micros(u.p99), 'p99 latency (uncorrected)'));
  parts.push(card(`${n(x.window.errors)}`, `errors of ${n(x.window.completed)}`));
  if (w) parts.push(card(`${n(w.cores, 3)} cores`, `waypoint CPU; ${n(w.vcpuPer1000, 3)} per 1000 req/s`));
  if (w) parts.push(card(`${n(w.rssPeakMiB, 1)} MiB`, 'waypoint peak RSS'));
  parts.push('</div>');
  parts.push('<h2>Latency</h2>');
  parts.push(
    table(
      ['', 'p50', 'p90', 'p99', 'p99.9', 'max', 'mean', 'count'],
      [
        ['corrected (from when due)', micros(c.p50), micros(c.p90), micros(c.p99), micros(c.p999), micros(c.max), micros(c.mean), n(c.count)],
        ['uncorrected (from when sent)', micros(u.p50), micros(u.p90), micros(u.p99), micros(u.p999), micros(u.max), micros(u.mean), n(u.count)],
      ],
    ),
  );
  parts.push(...runCharts(r));
  if (!w) parts.push('<p class="sub">Waypoint CPU and memory were not measured: give <code>--pid</code> (same machine) or <code>--admin</code> (a node-waypoint admin URL).</p>');
  parts.push('<h2>Answers and errors</h2>');
  parts.push(table(['code', 'count'], Object.entries(x.codes).map(([k, v]) => [k, n(v)])));
  if (Object.keys(x.errors).length > 0) parts.push(table(['error kind', 'count'], Object.entries(x.errors).map(([k, v]) => [k, n(v)])));
  if (x.errorSamples.length > 0) parts.push(`<details><summary>error samples</summary><ul>${x.errorSamples.map((e) => `<li><code>${esc(e)}</code></li>`).join('')}</ul></details>`);
  if (w) {
    parts.push('<h2>Waypoint resources</h2>');
    parts.push(
      table(
        ['source', 'CPU s', 'cores', 'CPU µs / request', 'vCPU per 1000 req/s', 'RSS MiB start → peak → end'],
        [[w.source, n(w.cpuSeconds, 3), n(w.cores, 3), n(w.usPerRequest, 1), n(w.vcpuPer1000, 3), `${n(w.rssStartMiB, 1)} → ${n(w.rssPeakMiB, 1)} → ${n(w.rssEndMiB, 1)}`]],
      ),
    );
    if (w.errors.length > 0) parts.push(`<div class="warn">Some readings failed: ${esc(w.errors.join('; '))}</div>`);
  }
  for (const p of x.prometheus) {
    parts.push(`<h2>Metrics: ${esc(p.url)}</h2>`);
    if (p.error) parts.push(`<div class="warn">${esc(p.error)}</div>`);
    if (!p.diff) continue;
    parts.push(`<p class="sub">Scraped before and after the run, ${n(p.seconds, 1)} s apart${p.diff.omitted > 0 ? `; ${n(p.diff.omitted)} series left out` : ''}.</p>`);
    parts.push(`<details open><summary>counters that moved (${p.diff.counters.length})</summary>${table(['series', 'delta', 'per second'], p.diff.counters.map((d) => [d.series, shortNumber(d.delta), shortNumber(d.perSecond)]))}</details>`);
    if (p.diff.gauges.length > 0) parts.push(`<details><summary>gauges that moved (${p.diff.gauges.length})</summary>${table(['series', 'before', 'after'], p.diff.gauges.map((d) => [d.series, shortNumber(d.before), shortNumber(d.after)]))}</details>`);
  }
  parts.push('<h2>Settings</h2>');
  const rows: [string, string][] = [
    ['transport', x.transport],
    ['protocol', s.protocol],
    ['loop', s.rate === null ? 'closed (each slot sends when its last answer came)' : `open, ${n(s.rate)} req/s`],
    ['connections × streams', `${s.connections} × ${s.streams}`],
    ['measured', s.durationMs !== null ? `${s.durationMs / 1000} s` : `${n(s.requests)} requests`],
    ['warm-up', `${s.warmupMs / 1000} s`],
    ['request', s.protocol === 'grpc' ? `gRPC ${s.grpcMethod}, ${s.bodyBytes} B message` : `${s.method} ${s.path}, ${s.bodyBytes} B body, Host ${s.host}`],
    ['timeout', `${s.timeoutMs / 1000} s`],
    ['measured window', `${n(x.window.seconds, 3)} s, ${n(x.window.sent)} sent, most in flight ${n(x.concurrency.maxInFlight)}, most waiting ${n(x.concurrency.maxQueued)}`],
    ['machine', `${x.host.hostname}, ${x.host.cpus} CPUs, Node ${x.host.node}`],
  ];
  parts.push(table(['setting', 'value'], rows));
  return page(`Load test: ${runName(r)}`, parts.join('\n'), r);
}
