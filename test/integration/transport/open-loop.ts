/**
 * A well-behaved client measuring the waypoint under someone else's abuse: one request every
 * `intervalMs` on its own HBONE session, whether or not the previous ones were answered (open
 * loop, so a stalled waypoint shows as latency rather than as fewer samples).
 */
import type { ClientHttp2Session } from 'node:http2';
import { connect, exchange } from '../../helpers/hbone-client.ts';

export interface OpenLoopResult {
  /** Latencies (ms) of the answered requests, sorted. */
  readonly latencies: number[];
  /** Requests that failed, got a status other than 200, or no answer within 10 s. */
  readonly failed: number;
}

export async function openLoop(session: ClientHttp2Session, authority: string, durationMs: number, intervalMs = 20): Promise<OpenLoopResult> {
  const latencies: number[] = [];
  let failed = 0;
  const one = async () => {
    const t = performance.now();
    try {
      const { status, stream } = await connect(session, authority);
      if (status !== 200) throw new Error(`CONNECT ${status}`);
      const r = await Promise.race([
        exchange(stream, '/open-loop'),
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error('no answer in 10 s')), 10_000).unref()),
      ]);
      stream.close();
      if (r.status !== 200) throw new Error(`GET ${r.status}`);
      latencies.push(performance.now() - t);
    } catch {
      failed++;
    }
  };
  const pending: Promise<void>[] = [];
  const end = performance.now() + durationMs;
  while (performance.now() < end) {
    pending.push(one());
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  await Promise.all(pending);
  latencies.sort((a, b) => a - b);
  return { latencies, failed };
}

/** The `q` quantile (0..1) of sorted `xs`. */
export function quantile(xs: readonly number[], q: number): number {
  return xs.length === 0 ? NaN : xs[Math.min(xs.length - 1, Math.floor(xs.length * q))];
}
