/**
 * SIGTERM/SIGINT handling shared by the long-running commands: the first signal starts a graceful
 * stop, and the process exits 0 when it completes (1 if it failed); a second signal exits at once.
 */
import { log } from '../util/index.ts';

/** Run `stop` on the first SIGTERM/SIGINT and exit 0 when it resolves (1 if it rejects); exit 1 at once on a second signal. */
export function onTerminate(stop: () => Promise<unknown>): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}
