/**
 * The access log files: non-blocking writers (sonic-boom), one per path, opened on first use and
 * reopened after an error; shared by Istio's default line (access-log.ts) and the Telemetry API's
 * file providers (telemetry-log.ts).
 */
import type { Logger } from 'pino';
import sonicBoom, { type SonicBoom } from 'sonic-boom';

// sonic-boom is CommonJS: its class is the module itself (also exported as `.SonicBoom`).
const SonicBoomClass = sonicBoom.SonicBoom;

/** Most bytes buffered for one file before lines are dropped (a reader that stopped reading). */
const MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
/** After a file could not be opened or written, wait this long (ms) before opening it again. */
const REOPEN_BACKOFF_MS = 5_000;
/** A file written alongside others is closed once it had no line for this long (ms). */
const IDLE_CLOSE_MS = 60_000;
/** `close()` waits at most this long (ms) for buffered lines to reach a file nobody reads. */
const CLOSE_TIMEOUT_MS = 2_000;

/**
 * One access log file, written asynchronously (sonic-boom: at most one `write(2)` in flight, lines
 * arriving meanwhile are batched into the next one). `/dev/stdout` and `/dev/stderr` use the
 * process's descriptors 1 and 2 (which are never closed). Errors never throw: the first one is
 * logged at warn and the sink turns {@link broken}; lines beyond 16 MiB of backlog are dropped.
 */
export class AccessLogSink {
  readonly path: string;
  /** True after an open or write error; lines are then dropped. */
  broken: boolean;
  /** Lines dropped because the backlog was full. */
  dropped: number;
  private readonly boom: SonicBoom;
  private readonly log: Logger;
  private closing: Promise<void> | undefined;

  /** Opens `path` for appending (asynchronously; an error surfaces as {@link broken}). */
  constructor(path: string, log: Logger) {
    this.path = path;
    this.broken = false;
    this.dropped = 0;
    this.log = log;
    this.closing = undefined;
    const fd = path === '/dev/stdout' ? 1 : path === '/dev/stderr' ? 2 : undefined;
    this.boom = new SonicBoomClass({ ...(fd === undefined ? { dest: path } : { fd }), append: true, sync: false, maxLength: MAX_BUFFERED_BYTES });
    this.boom.on('error', (err: Error) => {
      if (this.broken) return;
      this.broken = true;
      this.log.warn({ err, path }, 'access log: cannot write the file; dropping lines');
      try {
        this.boom.destroy();
      } catch {
        // already destroyed
      }
    });
    this.boom.on('drop', () => {
      if (this.dropped++ === 0) this.log.warn({ path }, `access log: more than ${MAX_BUFFERED_BYTES} bytes waiting to be written; dropping lines`);
    });
  }

  /** Queue one line (already newline-terminated). Never throws, never blocks. */
  write(line: string): void {
    if (this.broken || this.closing) return;
    try {
      this.boom.write(line);
    } catch (err) {
      this.broken = true;
      this.log.debug({ err, path: this.path }, 'access log: write failed');
    }
  }

  /** Flush what is buffered, then close (descriptors 1 and 2 stay open). Resolves within 2 s, even on a stuck reader. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      if (this.broken) return resolve();
      const timer = setTimeout(() => {
        this.log.warn({ path: this.path }, 'access log: lines still unwritten at close; dropping them');
        try {
          this.boom.destroy();
        } catch {
          // already destroyed
        }
        resolve();
      }, CLOSE_TIMEOUT_MS);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.boom.once('close', done);
      this.boom.once('error', done);
      try {
        this.boom.end();
      } catch {
        done();
      }
    });
    return this.closing;
  }
}

/**
 * The open access log files, one {@link AccessLogSink} per path, shared by every line. Only the
 * path in use stays open: when the configured path changes, the previous file is flushed and
 * closed. A broken file is reopened after a 5 s back-off. {@link close} flushes and closes all.
 */
export class AccessLogSinks {
  private readonly log: Logger;
  private readonly sinks: Map<string, AccessLogSink>;
  private readonly retryAt: Map<string, number>;
  /** Files written `alongside`: when each last got a line. */
  private readonly lastUse = new Map<string, number>();
  private current: AccessLogSink | undefined;
  private closed: boolean;

  constructor(log: Logger) {
    this.log = log;
    this.sinks = new Map();
    this.retryAt = new Map();
    this.current = undefined;
    this.closed = false;
  }

  /**
   * The sink for `path`, opened on first use; undefined after {@link close} or while a broken file
   * backs off. Every other file is closed (one configured path: MeshConfig `accessLogFile`), unless
   * `alongside` (Telemetry providers write several files at once): then only files idle for
   * a minute are closed, when a new one opens.
   */
  use(path: string, alongside = false): AccessLogSink | undefined {
    const cur = this.current;
    if (cur && cur.path === path && !cur.broken) return cur;
    if (this.closed) return undefined;
    let sink = this.sinks.get(path);
    if (sink?.broken) {
      this.sinks.delete(path);
      if (!this.retryAt.has(path)) this.retryAt.set(path, performance.now() + REOPEN_BACKOFF_MS);
      sink = undefined;
    }
    const now = performance.now();
    if (!sink) {
      const at = this.retryAt.get(path);
      if (at !== undefined && now < at) return undefined;
      this.retryAt.delete(path);
      sink = new AccessLogSink(path, this.log);
      this.sinks.set(path, sink);
      if (alongside) this.closeIdle(now);
    }
    if (alongside) {
      this.lastUse.set(path, now);
      return sink;
    }
    for (const [p, other] of this.sinks) {
      if (p === path) continue;
      this.sinks.delete(p);
      void other.close();
    }
    this.lastUse.clear();
    this.current = sink;
    return sink;
  }

  /** Close the files written `alongside` that had no line for {@link IDLE_CLOSE_MS} (a configuration stopped using them). */
  private closeIdle(now: number): void {
    for (const [p, at] of this.lastUse) {
      if (now - at < IDLE_CLOSE_MS) continue;
      this.lastUse.delete(p);
      const idle = this.sinks.get(p);
      this.sinks.delete(p);
      if (idle === this.current) this.current = undefined;
      void idle?.close();
    }
  }

  /** Flush and close every file; later lines are dropped. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    this.current = undefined;
    const all = [...this.sinks.values()];
    this.sinks.clear();
    await Promise.all(all.map((s) => s.close()));
  }
}

