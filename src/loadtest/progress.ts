/**
 * The live progress line of a load test (cli-progress): on a terminal, one line redrawn in place
 * with a bar, elapsed/ETA, the current rate, errors and p99; elsewhere (CI logs, pipes) the same
 * figures as plain lines every few seconds.
 */
import cliProgress from 'cli-progress';
import { micros } from './charts.ts';
import type { Progress } from './engine.ts';
import type { IntervalSample } from './recorder.ts';

export interface ProgressDisplay {
  update(p: Progress, sample: IntervalSample | undefined): void;
  /** The last line: `done` at the planned end, or `interrupted` where the run stopped. */
  stop(interrupted?: boolean): void;
}

const secs = (ms: number) => `${Math.max(0, Math.round(ms / 100) / 10).toFixed(1)}s`;

/** A progress display on `stream` (stderr by default); `plainEveryMs` paces the lines off a terminal. */
export function progressDisplay(stream: NodeJS.WriteStream = process.stderr, plainEveryMs = 5_000): ProgressDisplay {
  const tty = stream.isTTY === true;
  const bar = new cliProgress.SingleBar(
    {
      stream,
      format: tty ? 'loadtest {bar} {phase} {elapsed}/{planned} ETA {remaining} | {rate} req/s | errors {errors} | p99 {p99}' : 'loadtest: {phase} {elapsed}/{planned} ETA {remaining} | {rate} req/s | errors {errors} | p99 {p99}',
      barsize: 24,
      hideCursor: tty,
      noTTYOutput: true,
      notTTYSchedule: plainEveryMs,
      fps: 5,
      gracefulExit: false,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  let rate = 0;
  let last: Record<string, string> = {};
  return {
    update(p, sample) {
      if (sample) rate = sample.rps;
      const planned = p.plannedMs ?? (p.planned && p.completed > 0 && p.elapsedMs > 0 ? (p.planned / p.completed) * p.elapsedMs : null);
      const fraction = p.phase === 'warmup' || !planned ? 0 : Math.min(1, p.elapsedMs / planned);
      last = {
        phase: p.phase === 'warmup' ? 'warm-up' : p.phase === 'drain' ? 'finishing' : 'measuring',
        elapsed: secs(p.elapsedMs),
        planned: planned ? secs(planned) : '?',
        // Not `eta`: cli-progress fills that one itself, from the bar's value. In the warm-up
        // (elapsed < 0) what remains of it counts too.
        remaining: planned ? secs(planned - p.elapsedMs) : '?',
        rate: rate.toFixed(0),
        errors: String(p.errors),
        p99: p.p99Us > 0 ? micros(p.p99Us) : '-',
      };
      if (!started) {
        started = true;
        bar.start(1000, 0, last);
      }
      bar.update(Math.round(fraction * 1000), last);
    },
    stop(interrupted = false) {
      if (!started) return;
      if (interrupted) bar.update({ ...last, phase: 'interrupted', remaining: '-' });
      else bar.update(1000, { ...last, phase: 'done', elapsed: last.planned === '?' ? last.elapsed : last.planned, remaining: '0.0s' });
      bar.stop();
    },
  };
}
