/**
 * The process logger: pino, JSON lines on stderr (stdout stays free for the CLI's own output,
 * such as the demo's curl line). Level from `WAYPOINT_LOG_LEVEL` (default `info`); the CLI's
 * `--log-level` calls {@link setLogLevel}.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export const log: Logger = pino(
  { level: process.env.WAYPOINT_LOG_LEVEL ?? 'info', base: { pid: process.pid } },
  pino.destination({ fd: 2, sync: false }),
);

/** Change the level of {@link log} and every child logger created from it. */
export function setLogLevel(level: string): void {
  log.level = level;
}
