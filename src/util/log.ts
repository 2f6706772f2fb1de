/**
 * The process logger: pino, JSON lines on stderr (stdout stays free for the CLI's own output,
 * such as the demo's curl line). Level from `WAYPOINT_LOG_LEVEL` (default `info`); the CLI's
 * `--log-level` calls {@link setLogLevel}.
 *
 * When whoever reads our output stops reading or goes away (`waypoint run | head`), writes fail with
 * EAGAIN or EPIPE: logging then stops quietly instead of throwing or blocking shutdown.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

// Synchronous writes: nothing is left to flush at exit (sonic-boom's exit flush retries EPIPE
// forever, which hung SIGTERM when stderr was a closed pipe), and a reader that stops reading
// costs us a dropped line, never a busy retry. Nothing logs per request at the default level.
const destination = pino.destination({ fd: 2, sync: true, retryEAGAIN: () => false });
let broken = false;
destination.on('error', (err: NodeJS.ErrnoException) => {
  if (broken) return;
  broken = true;
  log.level = 'silent';
});
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
  });
}

export const log: Logger = pino({ level: process.env.WAYPOINT_LOG_LEVEL ?? 'info', base: { pid: process.pid } }, destination);

/** Change the level of {@link log} and every child logger created from it. */
export function setLogLevel(level: string): void {
  if (!broken) log.level = level;
}
