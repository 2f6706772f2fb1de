/**
 * A worker process of `waypoint run --concurrency N` (node:cluster runs this file): one whole
 * waypoint — HBONE server, filter chain, upstream pools — started from what the primary sends. It
 * binds no HBONE listener: the primary accepts each connection and hands it over (listener.ts), and
 * the worker answers whether it took it. It takes the primary's certificate (pushed as PEM) instead of
 * issuing one, compiles the mesh files itself when the primary says they changed (a snapshot is a
 * graph of closures: each process compiles its own from the same source), answers the primary's
 * metrics and config_dump requests, and drains on `shutdown`. Its admin server listens on an
 * ephemeral loopback port nobody is told about: the configured admin and readiness addresses are the
 * primary's.
 *
 * Logging: at `info` only the primary reports (the workers' lifecycle lines would repeat it N
 * times); workers log warnings and errors, or everything from `debug` down.
 */
import { Socket } from 'node:net';
import { pathToFileURL } from 'node:url';
import { Waypoint } from '../app.ts';
import type { BootstrapConfig } from '../config/index.ts';
import type { FilterFactory } from '../pipeline/index.ts';
import { log, setLogLevel } from '../util/index.ts';
import { PushedIssuer } from './pushed-issuer.ts';
import { serializeError, type FromWorker, type ToWorker, type WorkerStart } from './protocol.ts';

/** How long after the primary's drain delay a signalled worker waits for the primary's `shutdown` before it drains on its own (ms). */
const SIGNAL_GRACE_MS = 1_000;

let wp: Waypoint | undefined;
let startedWith: WorkerStart | undefined;
/** Serves a connection the primary handed over (the waypoint's HBONE server); false once it drains. */
let accept: ((socket: Socket) => boolean) | undefined;
let issuer: PushedIssuer | undefined;
let stopping: Promise<void> | undefined;
/** The last mesh update received before the waypoint was started: applied (and answered) once it is. */
let meshWhileStarting: number | undefined;

function send(m: FromWorker): void {
  if (process.connected) process.send!(m);
}

/**
 * The worker's bootstrap: the primary's, with the admin server moved to an unadvertised loopback
 * port and no readiness server; the connection limits and the drain delay are the primary's (it
 * counts every worker's connections, and closes the listener once the delay is over).
 */
function workerBootstrap(b: BootstrapConfig): BootstrapConfig {
  return {
    ...b,
    listeners: { ...b.listeners, admin: '127.0.0.1:0', readiness: '' },
    limits: { ...b.limits, maxConnectionsPerPeer: 0, peerConnectionRate: 0 },
    drain: { ...b.drain, delayMs: 0 },
  };
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
  startedWith = s;
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
      handedOverHbone: {
        address: s.hbone,
        serve: (fn) => (accept = fn),
        onPeerThrottled: (ip, forMs) => send({ t: 'peer-throttled', ip, forMs }),
      },
    });
  } catch (err) {
    // Exit once the primary has the error (it reports it, as a single process would).
    const failed: FromWorker = { t: 'failed', error: serializeError(err) };
    if (process.connected) process.send!(failed, () => process.exit(1));
    else process.exit(1);
    return;
  }
  send({ t: 'ready' });
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

/** A connection the primary accepted: served here, or declined (not started, or draining) for the primary to hand on. */
function takeConnection(id: number, socket: Socket | undefined): void {
  const taken = socket !== undefined && !stopping && accept !== undefined && accept(socket);
  send({ t: 'conn-taken', id, taken });
  // Declined: this process's descriptor only (the primary's copy keeps the connection open).
  if (!taken) socket?.destroy();
  else socket.once('close', () => send({ t: 'conn-closed', id }));
}

async function answer(id: number, get: () => unknown): Promise<void> {
  try {
    send({ t: 'reply', id, value: await get() });
  } catch (err) {
    send({ t: 'reply', id, error: (err as Error).message });
  }
}

process.on('message', (m: ToWorker, handle?: unknown) => {
  switch (m.t) {
    case 'conn':
      takeConnection(m.id, handle instanceof Socket ? handle : undefined);
      break;
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
// A terminal's Ctrl-C reaches the whole process group: the primary, which got it too, drains the
// workers once it closed the listener (after `drain.delayMs`); a worker signalled alone drains after that long.
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, () => setTimeout(() => void stop(), (startedWith?.bootstrap.drain.delayMs ?? 0) + SIGNAL_GRACE_MS).unref());
process.on('SIGHUP', () => {});
send({ t: 'loaded' });
