/**
 * A worker process of `waypoint run --concurrency N` (node:cluster runs this file): one whole
 * waypoint — HBONE listener (the port shared through the primary), filter chain, upstream pools —
 * started from what the primary sends. It takes the primary's certificate (pushed as PEM) instead of
 * issuing one, compiles the mesh files itself when the primary says they changed (a snapshot is a
 * graph of closures: each process compiles its own from the same source), answers the primary's
 * metrics and config_dump requests, and drains on `shutdown`. Its admin server listens on an
 * ephemeral loopback port nobody is told about: the configured admin and readiness addresses are the
 * primary's.
 *
 * Logging: at `info` only the primary reports (the workers' lifecycle lines would repeat it N
 * times); workers log warnings and errors, or everything from `debug` down.
 */
import { pathToFileURL } from 'node:url';
import { Waypoint } from '../app.ts';
import type { BootstrapConfig } from '../config/index.ts';
import type { FilterFactory } from '../pipeline/index.ts';
import { log, setLogLevel } from '../util/index.ts';
import { PushedIssuer } from './pushed-issuer.ts';
import { serializeError, type FromWorker, type ToWorker, type WorkerStart } from './protocol.ts';

let wp: Waypoint | undefined;
let issuer: PushedIssuer | undefined;
let stopping: Promise<void> | undefined;
/** The last mesh update received before the waypoint was started: applied (and answered) once it is. */
let meshWhileStarting: number | undefined;

function send(m: FromWorker): void {
  if (process.connected) process.send!(m);
}

/** The worker's bootstrap: the primary's, with the admin server moved to an unadvertised loopback port and no readiness server. */
function workerBootstrap(b: BootstrapConfig): BootstrapConfig {
  return { ...b, listeners: { ...b.listeners, admin: '127.0.0.1:0', readiness: '' } };
}

/** pino's numeric levels: workers log at warn unless the primary logs below info. */
function workerLevel(level: string): string {
  const n = log.levels.values[level] ?? 30;
  return n < 30 ? level : n > 40 ? level : 'warn';
}

/** The filter factories the primary's `filterModules` export (`filterFactories`). @throws Error naming a module without them. */
async function importFilters(modules: readonly string[]): Promise<FilterFactory<unknown>[]> {
  const out: FilterFactory<unknown>[] = [];
  for (const m of modules) {
    const mod = (await import(/^[a-z][a-z0-9+.-]*:/i.test(m) ? m : pathToFileURL(m).href)) as { filterFactories?: unknown };
    if (!Array.isArray(mod.filterFactories)) throw new Error(`filter module ${m}: expected an export \`filterFactories\` (an array of filter factories)`);
    out.push(...(mod.filterFactories as FilterFactory<unknown>[]));
  }
  return out;
}

async function start(s: WorkerStart): Promise<void> {
  setLogLevel(workerLevel(s.logLevel));
  issuer = new PushedIssuer(s.trustDomain, s.certificate);
  try {
    const extraFilters = await importFilters(s.filterModules);
    wp = await Waypoint.start({
      bootstrap: workerBootstrap(s.bootstrap),
      meshFile: s.meshFile,
      meshConfigFile: s.meshConfigFile,
      gateway: s.gateway,
      caDir: s.caDir,
      configFile: s.configFile,
      // The primary watches the files and says when to read them again.
      watch: false,
      issuer,
      extraFilters,
    });
  } catch (err) {
    // Exit once the primary has the error (it reports it, as a single process would).
    const failed: FromWorker = { t: 'failed', error: serializeError(err) };
    if (process.connected) process.send!(failed, () => process.exit(1));
    else process.exit(1);
    return;
  }
  const a = wp.addresses.hbone;
  send({ t: 'ready', hbone: { address: a.address, family: a.family, port: a.port } });
  // The files may have changed after the start read them: read them again.
  if (meshWhileStarting !== undefined) void applyMesh(meshWhileStarting);
}

/** As SIGHUP does in one process: the files, and WaypointFilter modules whose code changed; then tell the primary. */
async function applyMesh(seq: number): Promise<void> {
  if (!wp) {
    meshWhileStarting = seq;
    return;
  }
  try {
    await wp.reload();
  } catch (err) {
    log.error({ err }, 'worker mesh reload failed');
  }
  send({ t: 'mesh-applied', seq });
}

/** Drain and exit; idempotent (the primary's `shutdown`, a signal of our own, or the primary gone). */
function stop(): Promise<void> {
  stopping ??= (async () => {
    try {
      await wp?.shutdown();
    } catch (err) {
      log.error({ err }, 'worker shutdown failed');
      process.exitCode = 1;
    }
    process.exit();
  })();
  return stopping;
}

async function answer(id: number, get: () => unknown): Promise<void> {
  try {
    send({ t: 'reply', id, value: await get() });
  } catch (err) {
    send({ t: 'reply', id, error: (err as Error).message });
  }
}

process.on('message', (m: ToWorker) => {
  switch (m.t) {
    case 'start':
      void start(m.start);
      break;
    case 'certificate':
      issuer?.push(m.certificate);
      break;
    case 'mesh':
      void applyMesh(m.seq);
      break;
    case 'shutdown':
      void stop();
      break;
    case 'metrics':
      void answer(m.id, () => (wp ? wp.metrics.getMetricsAsJSON() : []));
      break;
    case 'config-dump':
      void answer(m.id, () => wp?.configDump());
      break;
  }
});
// The primary went away (killed): nobody will tell us to stop or send certificates any more.
process.on('disconnect', () => void stop());
// A terminal's Ctrl-C reaches the whole process group: drain as the primary will ask anyway.
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, () => void stop());
process.on('SIGHUP', () => {});
send({ t: 'loaded' });
