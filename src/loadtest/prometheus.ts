/**
 * Prometheus text exposition (the format of Envoy's and node-waypoint's `/stats/prometheus`;
 * prometheus/docs content/docs/instrumenting/exposition_formats.md): parsed into samples, and two
 * scrapes — before and after a load test — turned into what changed: counter deltas and gauges
 * before → after.
 */

export interface PromSample {
  readonly name: string;
  /** The label set as written (`{a="b",c="d"}`, or '' without labels). */
  readonly labels: string;
  readonly value: number;
}

export interface PromScrape {
  readonly samples: ReadonlyMap<string, PromSample>;
  /** `# TYPE` of each metric family. */
  readonly types: ReadonlyMap<string, string>;
}

/** Parse exposition text. Unparseable lines are skipped (a scrape is evidence, not input to trust). */
export function parsePrometheus(text: string): PromScrape {
  const samples = new Map<string, PromSample>();
  const types = new Map<string, string>();
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    if (line.startsWith('#')) {
      const t = /^# TYPE (\S+) (\S+)/.exec(line);
      if (t) types.set(t[1], t[2]);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$/.exec(line);
    if (!m) continue;
    const value = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    if (Number.isNaN(value) && m[3] !== 'NaN') continue;
    samples.set(`${m[1]}${m[2] ?? ''}`, { name: m[1], labels: m[2] ?? '', value });
  }
  return { samples, types };
}

/** The first sample of metric `name` (any labels), or undefined. */
export function firstValue(s: PromScrape, name: string): number | undefined {
  for (const v of s.samples.values()) if (v.name === name) return v.value;
  return undefined;
}

/** Family of a sample name: histogram and summary series carry suffixes. */
function familyOf(name: string, types: ReadonlyMap<string, string>): { family: string; type: string } {
  if (types.has(name)) return { family: name, type: types.get(name)! };
  for (const suffix of ['_count', '_sum', '_bucket', '_total']) {
    if (name.endsWith(suffix)) {
      const f = name.slice(0, -suffix.length);
      if (types.has(f)) return { family: f, type: types.get(f)! };
    }
  }
  return { family: name, type: name.endsWith('_total') ? 'counter' : 'untyped' };
}

export interface PromDiff {
  /** Counters (and histogram/summary `_count`/`_sum`) that moved: series, delta, per second. */
  readonly counters: readonly { readonly series: string; readonly delta: number; readonly perSecond: number }[];
  /** Gauges that moved: series, before, after. */
  readonly gauges: readonly { readonly series: string; readonly before: number; readonly after: number }[];
  /** Series left out to keep the report readable. */
  readonly omitted: number;
}

/** Most series of each kind kept in a diff (a mesh-wide Envoy scrape has thousands). */
const MAX_SERIES = 400;

/** What changed between two scrapes `seconds` apart (histogram buckets are left out). */
export function diffPrometheus(before: PromScrape, after: PromScrape, seconds: number): PromDiff {
  const counters: { series: string; delta: number; perSecond: number }[] = [];
  const gauges: { series: string; before: number; after: number }[] = [];
  for (const [key, a] of after.samples) {
    const b = before.samples.get(key)?.value ?? 0;
    if (a.value === b || !Number.isFinite(a.value) || a.name.endsWith('_bucket')) continue;
    const { type } = familyOf(a.name, after.types);
    if (type === 'gauge') gauges.push({ series: key, before: b, after: a.value });
    else if (type === 'counter' || type === 'histogram' || type === 'summary' || a.name.endsWith('_total')) {
      const delta = a.value - b;
      counters.push({ series: key, delta: round(delta), perSecond: round(delta / Math.max(seconds, 1e-3)) });
    }
  }
  counters.sort((x, y) => x.series.localeCompare(y.series));
  gauges.sort((x, y) => x.series.localeCompare(y.series));
  const omitted = Math.max(0, counters.length - MAX_SERIES) + Math.max(0, gauges.length - MAX_SERIES);
  return { counters: counters.slice(0, MAX_SERIES), gauges: gauges.slice(0, MAX_SERIES), omitted };
}

function round(v: number): number {
  return Math.round(v * 1000) / 1000;
}

/** GET `url` and parse it. @throws with the URL and the reason on any failure. */
export async function scrape(url: string, timeoutMs = 3_000): Promise<PromScrape> {
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    throw new Error(`scraping ${url}: ${(err as Error).message}`, { cause: err });
  }
  if (res.status !== 200) throw new Error(`scraping ${url}: status ${res.status}`);
  return parsePrometheus(await res.text());
}
