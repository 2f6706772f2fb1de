/**
 * The waypoint's side of a load test: its CPU and RSS over time, read from /proc when it runs on
 * this machine (`--pid`), or from a node-waypoint's admin endpoint (`--admin`:
 * `process_cpu_seconds_total` and `process_resident_memory_bytes` of its `/stats/prometheus`);
 * and for any waypoint (Envoy's or ours), its `/stats/prometheus` scraped before and after the run.
 */
import { treeUsage } from './proc.ts';
import { diffPrometheus, firstValue, scrape, type PromDiff, type PromScrape } from './prometheus.ts';

/** One reading: ms since the measured window began, CPU used over the last interval (cores), RSS. */
export interface ResourcePoint {
  readonly tMs: number;
  readonly cores: number;
  readonly rssMiB: number;
}

/** The waypoint's resources over the measured window. */
export interface ResourceReport {
  /** `pid 1234` or the admin URL. */
  readonly source: string;
  readonly cpuSeconds: number;
  /** Average cores over the window. */
  readonly cores: number;
  readonly usPerRequest: number | null;
  /** Cores per 1000 req/s (Istio's published waypoint figure). */
  readonly vcpuPer1000: number | null;
  readonly rssStartMiB: number;
  readonly rssPeakMiB: number;
  readonly rssEndMiB: number;
  readonly series: readonly ResourcePoint[];
  /** Readings that failed (the process went away, the endpoint did not answer). */
  readonly errors: readonly string[];
}

interface Reading {
  readonly at: number;
  readonly cpuS: number;
  readonly rssKiB: number;
}

/** Samples one process's CPU and RSS; call {@link sample} at the marks and every interval. */
export class ResourceMonitor {
  readonly source: string;
  private readonly read: () => Promise<Reading>;
  private readonly readings: Promise<Reading | undefined>[] = [];
  private readonly errors: string[] = [];
  private measureAt = 0;
  private startIndex = -1;
  private endIndex = -1;

  private constructor(source: string, read: () => Promise<Reading>) {
    this.source = source;
    this.read = read;
  }

  /** /proc of `pid` on this machine. @throws when no such process is readable. */
  static forPid(pid: number): ResourceMonitor {
    // The process and its descendants (a primary and its workers).
    const read = (): Reading => ({ at: performance.now(), ...treeUsage(pid) });
    try {
      read();
    } catch (err) {
      throw new Error(`--pid ${pid}: cannot read /proc/${pid} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); is the waypoint running on this machine?`, { cause: err });
    }
    return new ResourceMonitor(`pid ${pid}`, () => Promise.resolve(read()));
  }

  /** A node-waypoint admin endpoint (`http://HOST:15020`). @throws when it does not answer with the process metrics. */
  static async forAdmin(admin: string): Promise<ResourceMonitor> {
    const url = `${admin.replace(/\/+$/, '')}/stats/prometheus`;
    const read = async (): Promise<Reading> => {
      const at = performance.now();
      const s = await scrape(url, 2_000);
      const cpu = firstValue(s, 'process_cpu_seconds_total');
      const rss = firstValue(s, 'process_resident_memory_bytes');
      if (cpu === undefined || rss === undefined) throw new Error(`${url} has no process_cpu_seconds_total / process_resident_memory_bytes (is it a node-waypoint admin port?)`);
      return { at, cpuS: cpu, rssKiB: rss / 1024 };
    };
    try {
      await read();
    } catch (err) {
      throw new Error(`--admin ${admin}: ${(err as Error).message}`, { cause: err });
    }
    return new ResourceMonitor(url, read);
  }

  /** Take a reading now (asynchronously; failures are kept for the report). */
  sample(): void {
    this.readings.push(
      this.read().catch((err: unknown) => {
        if (this.errors.length < 5) this.errors.push((err as Error).message);
        return undefined;
      }),
    );
  }

  /** The measured window begins: the reading taken now is its baseline. */
  markStart(): void {
    this.measureAt = performance.now();
    this.startIndex = this.readings.length;
    this.sample();
  }

  markEnd(): void {
    this.endIndex = this.readings.length;
    this.sample();
  }

  /** The report over the window, for `requests` answered at `rps` req/s. */
  async report(requests: number, rps: number): Promise<ResourceReport | undefined> {
    const all = await Promise.all(this.readings);
    const start = all[this.startIndex];
    const end = all[this.endIndex];
    if (!start || !end) return undefined;
    const within = all.slice(this.startIndex, this.endIndex + 1).filter((r): r is Reading => r !== undefined);
    const series: ResourcePoint[] = [];
    for (let i = 1; i < within.length; i++) {
      const a = within[i - 1];
      const b = within[i];
      const wall = (b.at - a.at) / 1000;
      if (wall <= 0) continue;
      series.push({ tMs: Math.round(b.at - this.measureAt), cores: r4((b.cpuS - a.cpuS) / wall), rssMiB: r4(b.rssKiB / 1024) });
    }
    const cpuS = end.cpuS - start.cpuS;
    const wallS = Math.max(1e-3, (end.at - start.at) / 1000);
    const cores = cpuS / wallS;
    return {
      source: this.source,
      cpuSeconds: r4(cpuS),
      cores: r4(cores),
      usPerRequest: requests > 0 ? Math.round(((cpuS * 1e6) / requests) * 10) / 10 : null,
      vcpuPer1000: rps > 0 ? r4(cores / (rps / 1000)) : null,
      rssStartMiB: r4(start.rssKiB / 1024),
      rssPeakMiB: r4(Math.max(...within.map((r) => r.rssKiB)) / 1024),
      rssEndMiB: r4(end.rssKiB / 1024),
      series: [{ tMs: 0, cores: series[0]?.cores ?? 0, rssMiB: r4(start.rssKiB / 1024) }, ...series],
      errors: this.errors,
    };
  }
}

function r4(v: number): number {
  return Math.round(v * 10_000) / 10_000;
}

/** A `/stats/prometheus` scraped before and after the run. */
export interface PrometheusReport {
  readonly url: string;
  readonly seconds: number;
  readonly diff: PromDiff | null;
  readonly error: string | null;
}

/** Scrapes `url` before the run ({@link before}) and after it ({@link after}). */
export class PrometheusWatch {
  readonly url: string;
  private first: { at: number; scrape: PromScrape } | undefined;
  private error: string | null = null;

  constructor(url: string) {
    this.url = url;
  }

  /** @throws when the first scrape fails: a wrong URL should stop the run before any load. */
  async before(): Promise<void> {
    const at = performance.now();
    this.first = { at, scrape: await scrape(this.url) };
  }

  async after(): Promise<PrometheusReport> {
    const at = performance.now();
    const seconds = this.first ? Math.round(at - this.first.at) / 1000 : 0;
    try {
      const second = await scrape(this.url);
      return { url: this.url, seconds, diff: this.first ? diffPrometheus(this.first.scrape, second, seconds) : null, error: this.error };
    } catch (err) {
      return { url: this.url, seconds, diff: null, error: (err as Error).message };
    }
  }
}
