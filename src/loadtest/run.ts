/**
 * One load test from resolved settings to its report: the transport (HBONE through the waypoint
 * with the client identity, or plain TCP), the waypoint's monitors (CPU and RSS over time, metrics
 * before and after), the run itself with a progress display, and the result.
 */
import type { TlsMaterial } from '../hbone/index.ts';
import { runLoad, type LoadHooks } from './engine.ts';
import { PrometheusWatch, ResourceMonitor } from './monitor.ts';
import { LoadtestUsageError, type LoadtestSettings } from './options.ts';
import type { ProgressDisplay } from './progress.ts';
import { buildReport, type LoadtestReport } from './result.ts';
import { hboneTransport, tcpTransport, type Transport } from './transport.ts';

/** The client identity of an HBONE run. */
export interface ClientIdentity {
  material(): TlsMaterial;
  readonly trustDomain: string;
}

export interface RunOptions {
  readonly settings: LoadtestSettings;
  /** Required for an HBONE run. */
  readonly identity?: ClientIdentity;
  /** The waypoint's process on this machine, or a node-waypoint admin URL: its CPU and RSS over time. */
  readonly pid?: number;
  readonly admin?: string;
  /** `/stats/prometheus` URLs scraped before and after. */
  readonly statsUrls?: readonly string[];
  readonly progress?: ProgressDisplay;
  readonly signal?: AbortSignal;
  /** `node-waypoint <version>`, written into the result. */
  readonly version: string;
}

function transportFor(o: RunOptions): Transport {
  const s = o.settings;
  const connectTimeoutMs = Math.max(1_000, s.timeoutMs);
  if (s.via.kind === 'tcp') return tcpTransport(s.via.target, connectTimeoutMs);
  if (!o.identity) throw new LoadtestUsageError('an HBONE run needs a client identity: --identity PREFIX --ca ROOT, or --in-cluster');
  const v = s.via;
  return hboneTransport({
    waypoint: v.waypoint,
    authority: v.authority,
    material: o.identity.material,
    trustDomain: o.identity.trustDomain,
    expectSan: v.expectSan,
    bind: v.bind,
    tunnelsPerConnection: v.tunnelsPerConnection,
    connectHeaders: v.connectHeaders,
    connectTimeoutMs,
  });
}

/** Run the load test `o` describes. Rejects with LoadProbeError when the path does not work at all. */
export async function runLoadtest(o: RunOptions): Promise<LoadtestReport> {
  const s = o.settings;
  let monitor: ResourceMonitor | undefined;
  try {
    if (o.pid !== undefined) monitor = ResourceMonitor.forPid(o.pid);
    else if (o.admin !== undefined) monitor = await ResourceMonitor.forAdmin(o.admin);
  } catch (err) {
    throw new LoadtestUsageError((err as Error).message);
  }
  const watches = (o.statsUrls ?? []).map((u) => new PrometheusWatch(u));
  for (const w of watches) {
    try {
      await w.before();
    } catch (err) {
      throw new LoadtestUsageError(`--stats-url ${w.url}: ${(err as Error).message}`);
    }
  }
  const transport = transportFor(o);
  const description = transport.description;
  const hooks: LoadHooks = {
    onMeasureStart: () => monitor?.markStart(),
    onMeasureEnd: () => monitor?.markEnd(),
    onInterval: (sample, progress) => {
      if (sample) monitor?.sample();
      o.progress?.update(progress, sample);
    },
  };
  let load;
  let interrupted = false;
  try {
    load = await runLoad(
      {
        protocol: s.protocol,
        transport,
        connections: s.connections,
        streams: s.streams,
        rate: s.rate,
        requests: s.requests,
        durationMs: s.durationMs,
        warmupMs: s.warmupMs,
        spec: { method: s.method, path: s.path, authority: s.host, headers: s.headers, body: Buffer.alloc(s.bodyBytes, 0x78), grpcMethod: s.grpcMethod },
        timeoutMs: s.timeoutMs,
        intervalMs: s.intervalMs,
      },
      hooks,
      o.signal,
    );
    interrupted = load.interrupted;
  } finally {
    o.progress?.stop(interrupted);
  }
  const rec = load.recorder;
  const rps = rec.completed / (load.windowMs / 1000);
  const waypoint = (await monitor?.report(rec.completed, rps)) ?? null;
  const prometheus = await Promise.all(watches.map((w) => w.after()));
  return buildReport({ settings: s, transport: description, load, waypoint, prometheus, version: o.version });
}
