/**
 * A small parser for the Prometheus text format the admin port serves, for tests that compare the
 * full label set of each series.
 */

/** One sample line: metric name (with `_bucket`/`_sum`/`_count` as printed), labels in printed order, value. */
export interface Sample {
  readonly name: string;
  readonly labels: Record<string, string>;
  /** Label names in the order they were printed. */
  readonly order: string[];
  readonly value: number;
}

/** Parse every sample line of a text exposition (comments skipped). Throws on a line it cannot read. */
export function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparsable sample line: ${line}`);
    const labels: Record<string, string> = {};
    const order: string[] = [];
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/gy;
    const body = m[2] ?? '';
    let lm: RegExpExecArray | null;
    let consumed = 0;
    while ((lm = re.exec(body)) !== null) {
      labels[lm[1]] = lm[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
      order.push(lm[1]);
      consumed = re.lastIndex;
    }
    if (consumed !== body.length) throw new Error(`unparsable labels: ${line}`);
    out.push({ name: m[1], labels, order, value: Number(m[3]) });
  }
  return out;
}

/** Samples whose name starts with `prefix` (e.g. `istio_`). */
export function samplesOf(text: string, prefix: string): Sample[] {
  return parsePrometheus(text).filter((s) => s.name.startsWith(prefix));
}

/** Fetch `/stats/prometheus` from an admin address. */
export async function scrape(admin: { address: string; port: number }): Promise<string> {
  const res = await fetch(`http://${admin.address}:${admin.port}/stats/prometheus`);
  if (res.status !== 200) throw new Error(`scrape: HTTP ${res.status}`);
  return res.text();
}
