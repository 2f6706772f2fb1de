/**
 * Rate limit for warnings that a remote peer can trigger at will (refused identities, failed TLS
 * handshakes, malformed requests): at most one line per key per interval, the next one saying how
 * many were suppressed meanwhile, so a flood cannot fill the log or cost more than a map lookup.
 * Every occurrence is still counted in the metrics (by the caller) and logged at debug level.
 */
import { log } from './log.ts';

/** Keys remembered at most; beyond it the oldest are forgotten (a peer cycling keys cannot grow the map). */
const MAX_KEYS = 1024;

export class LogLimiter {
  private readonly intervalMs: number;
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(intervalMs = 10_000) {
    this.intervalMs = intervalMs;
  }

  /**
   * `undefined` when a warning for `key` must be suppressed now; otherwise log it, and the number
   * is how many were suppressed since the previous one (worth mentioning when > 0).
   */
  take(key: string, now = performance.now()): number | undefined {
    const entry = this.last.get(key);
    if (entry && now - entry.at < this.intervalMs) {
      entry.suppressed++;
      return undefined;
    }
    const suppressed = entry?.suppressed ?? 0;
    this.last.delete(key);
    if (this.last.size >= MAX_KEYS) this.last.delete(this.last.keys().next().value!);
    this.last.set(key, { at: now, suppressed: 0 });
    return suppressed;
  }

  /** Log at debug level, and as a warning at most once per `key` per interval (with the count suppressed meanwhile). */
  warn(key: string, fields: Record<string, unknown>, msg: string): void {
    log.debug(fields, msg);
    const suppressed = this.take(key);
    if (suppressed !== undefined) log.warn({ ...fields, suppressed }, msg);
  }
}
