/**
 * SVG charts for the HTML reports, drawn at generation time so the report needs no library and no
 * network when opened: d3-scale for the axes (linear, log, ticks) and d3-shape for the line paths.
 * They are the small, well-kept D3 modules that work without a DOM (d3-axis and d3-selection need
 * one); the SVG around them (axes, legend, hover read-out points) is written here.
 */
import { scaleLinear, scaleLog } from 'd3-scale';
import { line } from 'd3-shape';

export interface Series {
  readonly name: string;
  readonly points: readonly (readonly [number, number])[];
  readonly dashed?: boolean;
}

export interface LineChartSpec {
  /** Element id of the chart (`chart-…`), which the report's tests look for. */
  readonly id: string;
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  /** `nines`: x is a percentile drawn on HdrHistogram's 1/(1-p) log scale. */
  readonly xKind: 'linear' | 'nines';
  readonly yLog?: boolean;
  readonly xFormat?: (v: number) => string;
  readonly yFormat?: (v: number) => string;
  readonly series: readonly Series[];
}

const W = 760;
const H = 300;
const M = { top: 16, right: 20, bottom: 44, left: 72 };
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];

export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** Percentile → position on the nines axis (p50 → 0.3, p90 → 1, p99 → 2, ...). */
export function ninesOf(p: number, cap: number): number {
  return p >= 100 ? cap : Math.min(cap, -Math.log10(1 - p / 100));
}

/** Percentile label of a nines position. */
function ninesLabel(x: number): string {
  const p = 100 * (1 - 10 ** -x);
  return `${Number(p.toFixed(Math.max(0, Math.ceil(x) - 2)))}%`;
}

/** Short number: 1.2k, 3.4M; microseconds as µs/ms/s. */
export function shortNumber(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toPrecision(3)}k`;
  return `${+v.toPrecision(3)}`;
}

export function micros(us: number): string {
  if (us >= 1e6) return `${+(us / 1e6).toPrecision(3)} s`;
  if (us >= 1e3) return `${+(us / 1e3).toPrecision(3)} ms`;
  return `${Math.round(us)} µs`;
}

/** A line chart as an SVG figure; an empty series list draws the frame with a note. */
export function lineChart(c: LineChartSpec): string {
  const all = c.series.flatMap((s) => s.points);
  const maxP = Math.max(0, ...c.series.flatMap((s) => s.points.filter((p) => p[0] < 100).map((p) => p[0])));
  const cap = c.xKind === 'nines' ? Math.max(2, Math.ceil(ninesOf(maxP, 9) + 0.3)) : 0;
  const xv = (x: number) => (c.xKind === 'nines' ? ninesOf(x, cap) : x);
  const xs = all.map((p) => xv(p[0]));
  const ys = all.map((p) => p[1]);
  const x = scaleLinear()
    .domain(c.xKind === 'nines' ? [0, cap] : [Math.min(0, ...xs), Math.max(1, ...xs)])
    .range([M.left, W - M.right]);
  const yMax = Math.max(0, ...ys) || 1;
  const y = c.yLog
    ? scaleLog().domain([Math.max(1, Math.min(...ys.filter((v) => v > 0), yMax)), yMax * 1.1]).range([H - M.bottom, M.top]).clamp(true)
    : scaleLinear().domain([0, yMax * 1.1]).nice().range([H - M.bottom, M.top]);
  const fx = c.xFormat ?? shortNumber;
  const fy = c.yFormat ?? shortNumber;
  const out: string[] = [];
  out.push(`<figure class="chart" id="${esc(c.id)}"><figcaption>${esc(c.title)}</figcaption>`);
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(c.title)}">`);
  // Axes and grid.
  const xTicks = c.xKind === 'nines' ? Array.from({ length: cap + 1 }, (_, i) => i) : x.ticks(8);
  for (const t of xTicks) {
    const px = x(t);
    out.push(`<line class="grid" x1="${px}" x2="${px}" y1="${M.top}" y2="${H - M.bottom}"/>`);
    out.push(`<text class="tick" x="${px}" y="${H - M.bottom + 16}" text-anchor="middle">${esc(c.xKind === 'nines' ? ninesLabel(t) : fx(t))}</text>`);
  }
  const yTicks = c.yLog ? (y as ReturnType<typeof scaleLog>).ticks(6).filter((_, i, a) => a.length <= 8 || i % Math.ceil(a.length / 8) === 0) : y.ticks(6);
  for (const t of yTicks) {
    const py = y(t);
    out.push(`<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${py}" y2="${py}"/>`);
    out.push(`<text class="tick" x="${M.left - 6}" y="${py + 4}" text-anchor="end">${esc(fy(t))}</text>`);
  }
  out.push(`<line class="axis" x1="${M.left}" x2="${W - M.right}" y1="${H - M.bottom}" y2="${H - M.bottom}"/>`);
  out.push(`<line class="axis" x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${H - M.bottom}"/>`);
  out.push(`<text class="label" x="${(M.left + W - M.right) / 2}" y="${H - 6}" text-anchor="middle">${esc(c.xLabel)}</text>`);
  out.push(`<text class="label" transform="translate(14 ${(M.top + H - M.bottom) / 2}) rotate(-90)" text-anchor="middle">${esc(c.yLabel)}</text>`);
  if (all.length === 0) out.push(`<text class="empty" x="${W / 2}" y="${H / 2}" text-anchor="middle">no data</text>`);
  // Lines, each with its points for the read-out (pixel x, pixel y, x text, y text).
  const path = line<readonly [number, number]>()
    .x((p) => x(xv(p[0])))
    .y((p) => y(c.yLog ? Math.max(1, p[1]) : p[1]));
  c.series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const color = COLORS[i % COLORS.length];
    const pts = s.points.map((p) => [Math.round(x(xv(p[0]))), Math.round(y(c.yLog ? Math.max(1, p[1]) : p[1])), c.xKind === 'nines' ? `p${p[0]}` : fx(p[0]), fy(p[1])]);
    out.push(
      `<path class="series" d="${path(s.points) ?? ''}" stroke="${color}"${s.dashed ? ' stroke-dasharray="6 4"' : ''} data-series="${esc(s.name)}" data-points="${esc(JSON.stringify(pts))}"/>`,
    );
  });
  // Legend.
  c.series.forEach((s, i) => {
    const lx = M.left + 10 + i * 190;
    out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${M.top + 8}" y2="${M.top + 8}" stroke="${COLORS[i % COLORS.length]}" stroke-width="2.5"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    out.push(`<text class="legend" x="${lx + 28}" y="${M.top + 12}">${esc(s.name)}</text>`);
  });
  out.push(`<text class="readout" x="${W - M.right}" y="${M.top + 12}" text-anchor="end"></text>`);
  out.push('</svg></figure>');
  return out.join('\n');
}

export interface Bar {
  readonly label: string;
  readonly value: number | null;
  readonly text: string;
  /** Whether this ratio is good news (colours the bar). */
  readonly better?: boolean;
}

/** Horizontal bars of ratios around 1× (the compare report). */
export function ratioChart(id: string, title: string, bars: readonly Bar[]): string {
  const rowH = 26;
  const h = M.top + bars.length * rowH + 30;
  const left = 230;
  const vals = bars.map((b) => b.value).filter((v): v is number => v !== null && Number.isFinite(v) && v > 0);
  const lo = Math.min(0.5, ...vals) * 0.9;
  const hi = Math.max(2, ...vals) * 1.1;
  const x = scaleLog().domain([lo, hi]).range([left, W - 90]).clamp(true);
  const out: string[] = [`<figure class="chart" id="${esc(id)}"><figcaption>${esc(title)}</figcaption>`, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${h}" width="${W}" height="${h}" role="img" aria-label="${esc(title)}">`];
  const one = x(1);
  bars.forEach((b, i) => {
    const cy = M.top + i * rowH + rowH / 2;
    out.push(`<text class="tick" x="${left - 8}" y="${cy + 4}" text-anchor="end">${esc(b.label)}</text>`);
    if (b.value === null || !(b.value > 0)) {
      out.push(`<text class="tick" x="${one + 6}" y="${cy + 4}">n/a</text>`);
      return;
    }
    const px = x(b.value);
    const [a, z] = px < one ? [px, one] : [one, px];
    // A path (not a rect) so every chart is made of paths.
    out.push(`<path class="bar${b.better === undefined ? '' : b.better ? ' better' : ' worse'}" d="M${a},${cy - 8}H${z}V${cy + 8}H${a}Z" data-series="${esc(b.label)}" data-points="${esc(JSON.stringify([[Math.round(px), Math.round(cy), b.label, b.text]]))}"/>`);
    out.push(`<text class="tick" x="${Math.max(px, one) + 6}" y="${cy + 4}">${esc(b.text)}</text>`);
  });
  out.push(`<line class="axis" x1="${one}" x2="${one}" y1="${M.top - 4}" y2="${h - 26}"/>`);
  out.push(`<text class="label" x="${one}" y="${h - 8}" text-anchor="middle">1× (B = A)</text>`);
  out.push(`<text class="readout" x="${W - M.right}" y="${M.top}" text-anchor="end"></text>`);
  out.push('</svg></figure>');
  return out.join('\n');
}
