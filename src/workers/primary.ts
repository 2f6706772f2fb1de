/**
 * The primary of `waypoint run --concurrency N`: the process that holds the configuration, the mesh
 * files (watched), the identity (the CA and the renewing certificate), the HBONE listener and the
 * admin and readiness servers, and runs N worker processes (node:cluster) to which it hands the
 * HBONE connections in turn (listener.ts, where the per-client connection limits are counted for
 * all of them). Like Envoy's workers, each worker owns the connections it was handed; a long-lived
 * HBONE connection stays on one worker (istio/istio#51305).
 *
 * What goes to the workers is source, not compiled state: the bootstrap, the mesh files' paths
 * (each worker compiles them, again whenever the primary's snapshot changes) and the certificate as
 * PEM (again at every renewal). The primary compiles the mesh too, with the parts that may refuse
 * an update, so it passes on only what the workers take; `reload` resolves once every worker has
 * applied it. One scrape of the primary's `/stats/prometheus` shows the sum over the workers
 * (metrics.ts); `/config_dump` is a worker's. A worker that dies is replaced, the others and their
 * tunnels untouched; one that keeps dying is restarted less and less often. `shutdown` drains as one
 * waypoint does: new tunnels for `drain.delayMs`, then the primary closes the listener and every
 * worker sends GOAWAY and finishes what is in flight. The peer stream rate is each worker's own.
 */
import cluster, { type Worker } from 'node:cluster';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AdminServer } from '../admin/index.ts';
import type { BootstrapConfig } from '../config/index.ts';
import { addr, checkCaTrustDomain, meshCa, type SourceOrigin } from '../app.ts';
import { refuseIdentityChange } from '../sources.ts';
import { parseTtl, WorkloadCertificate } from '../identity/index.ts';
import { MeshStore } from '../state/index.ts';
import { createMetricsRegistry } from '../telemetry/index.ts';
import { log } from '../util/index.ts';
import { PrimaryListener } from './listener.ts';
import { primaryParts } from './primary-parts.ts';
import { WorkersRegistry, type WorkerMetrics } from './metrics.ts';
import { deserializeError, type FromWorker, type PushedCertificate, type ToWorker, type WorkerStart } from './protocol.ts';

/** The file node:cluster runs in each worker. */
const WORKER_ENTRY = path.join(path.dirname(fileURLToPath(import.meta.url)), 'worker.ts');
/** How long a worker may take to answer a metrics or config_dump request (ms). */
const ASK_TIMEOUT_MS = 3_000;
/** A worker that lived less than this (ms) crashed at start: its replacement waits, doubling up to RESTART_MAX_MS. */
const RESTART_QUICK_MS = 5_000;
const RESTART_MAX_MS = 30_000;
/** How long {@link WaypointWorkers.meshApplied} waits for a worker to apply a mesh update before it stops waiting for it (ms). */
const MESH_APPLY_TIMEOUT_MS = 30_000;

/** Inputs of {@link startWorkers}: `waypoint run`'s, plus how many workers. */
export interface WorkersOptions {
  readonly concurrency: number;
  readonly bootstrap: BootstrapConfig;
  readonly meshFile: string;
  readonly meshConfigFile?: string;
  readonly gateway?: string;
  readonly caDir?: string;
  readonly configFile?: string;
  /** Watch the mesh files (default true); without it, edits apply on {@link WaypointWorkers.reload} only (WaypointOptions.watch). */
  readonly watch?: boolean;
  /**
   * Paths of ES modules each worker imports at start; each exports `filterFactories` (FilterFactory[]),
   * added to the worker's filters as WaypointOptions.extraFilters adds them in one process (a factory
   * object cannot cross to a worker, a module can: embedding and tests). Such a filter may talk to
   * the primary with `process.send`; messages of its own types reach cluster's 'message' listeners.
   */
  readonly filterModules?: readonly string[];
}

interface Slot {
  readonly index: number;
  worker: Worker | undefined;
  ready: boolean;
  startedAt: number;
  /** Restart delay after a quick crash (ms), 0 when it lived long. */
  backoffMs: number;
  timer: NodeJS.Timeout | undefined;
  /** The last mesh update (`mesh` message seq) the worker applied; at fork, the updates sent so far (it reads the files after). */
  meshSeq: number;
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * The running primary; the fields `waypoint run` prints and uses are those of a single-process
 * Waypoint (app.ts).
 */
export class WaypointWorkers {
  addresses!: { readonly hbone: AddressInfo; readonly admin: AddressInfo; readonly readiness: AddressInfo | undefined };
  readonly mesh: MeshStore;
  readonly caDir: string;
  readonly caCreated: boolean;
  readonly #opts: WorkersOptions;
  readonly #certificate: WorkloadCertificate;
  readonly #trustDomain: string;
  readonly #slots: Slot[] = [];
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #admin: AdminServer | undefined;
  #readiness: AdminServer | undefined;
  #draining = false;
  /** The workers were told to drain (after `drain.delayMs`): one that becomes ready now drains too. */
  #stopping = false;
  #listener: PrimaryListener | undefined;
  #stopped: Promise<void> | undefined;
  /** The address of the HBONE listener (the primary's). */
  #hbone: AddressInfo | undefined;
  /** Sequence number of the last mesh update sent to the workers. */
  #meshSeq = 0;
  /** {@link meshApplied} calls waiting for every serving worker to apply update `seq`. */
  readonly #meshWaiters = new Set<{ readonly seq: number; resolve(): void }>();

  private constructor(opts: WorkersOptions, mesh: MeshStore, certificate: WorkloadCertificate, ca: { dir: string; created: boolean; trustDomain: string }) {
    this.#opts = opts;
    this.mesh = mesh;
    this.#certificate = certificate;
    this.caDir = ca.dir;
    this.caCreated = ca.created;
    this.#trustDomain = ca.trustDomain;
  }

  /** Workers serving now. */
  get readyWorkers(): number {
    return this.#slots.filter((s) => s.ready).length;
  }

  /**
   * Load the mesh files and the CA, issue the certificate, start the workers and, once all serve,
   * the admin and readiness servers. Throws what a single waypoint would (ConfigError, bind
   * errors, as a worker reported them); nothing is left running then.
   */
  /** Where the mesh and the certificate come from, as {@link Waypoint.origin} (the standalone mode only). */
  get origin(): SourceOrigin {
    return { mode: 'file', meshFile: this.#opts.meshFile, caDir: this.caDir, caCreated: this.caCreated };
  }

  /**
   * SIGHUP: re-read the mesh files here. A published change reaches the workers through the
   * subscription; an unchanged mesh is still sent on, since a WaypointFilter's module code may have
   * changed (each worker checks that in Waypoint.reload). Resolves once every serving worker has
   * applied it ({@link meshApplied}), as a single waypoint's reload resolves once it is in force.
   */
  async reload(): Promise<void> {
    const before = this.mesh.current.version;
    await this.mesh.reload();
    if (this.mesh.current.version === before) this.#sendMesh();
    await this.meshApplied();
  }

  /**
   * Resolves once every serving worker has applied the last mesh update sent to the workers (read
   * and compiled the files, published the snapshot): from then on a new request is served under it
   * whichever worker takes it. A worker that takes longer than MESH_APPLY_TIMEOUT_MS is logged and
   * no longer waited for (never rejects: SIGHUP's reload is not awaited).
   */
  meshApplied(): Promise<void> {
    const seq = this.#meshSeq;
    if (this.#appliedEverywhere(seq)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const waiter = {
        seq,
        resolve: () => {
          clearTimeout(timer);
          this.#meshWaiters.delete(waiter);
          resolve();
        },
      };
      const timer = setTimeout(() => {
        const late = this.#slots.filter((s) => s.ready && s.worker && s.meshSeq < seq).map((s) => s.index + 1);
        log.warn({ workers: late, seq, timeoutMs: MESH_APPLY_TIMEOUT_MS }, 'workers did not apply the mesh update in time; no longer waiting for them');
        waiter.resolve();
      }, MESH_APPLY_TIMEOUT_MS);
      this.#meshWaiters.add(waiter);
    });
  }

  #appliedEverywhere(seq: number): boolean {
    return this.#slots.every((s) => !s.ready || !s.worker || s.meshSeq >= seq);
  }

  #settleMeshWaiters(all = false): void {
    for (const w of this.#meshWaiters) if (all || this.#appliedEverywhere(w.seq)) w.resolve();
  }

  /** The mesh files changed (or SIGHUP): every worker reads them again. */
  #sendMesh(): void {
    this.#broadcast({ t: 'mesh', seq: ++this.#meshSeq });
  }

  static async start(opts: WorkersOptions): Promise<WaypointWorkers> {
    if (!cluster.isPrimary) throw new Error('the waypoint workers are started from the primary process');
    const mesh = await MeshStore.open({
      meshFile: opts.meshFile,
      meshConfigFile: opts.meshConfigFile,
      gateway: opts.gateway,
      watch: opts.watch ?? true,
      parts: primaryParts(opts.bootstrap.upstream.loadBalancer),
      accept: refuseIdentityChange,
    });
    let certificate: WorkloadCertificate | undefined;
    let self: WaypointWorkers | undefined;
    try {
      const snap = mesh.current;
      const trustDomain = snap.meshConfig.trustDomain;
      const { ca, caDir, created } = await meshCa(opts, trustDomain);
      checkCaTrustDomain(ca.trustDomain, caDir, trustDomain, opts);
      certificate = await WorkloadCertificate.start(ca, snap.waypoint.identity, parseTtl(opts.bootstrap.identity.certTtl));
      self = new WaypointWorkers(opts, mesh, certificate, { dir: caDir, created, trustDomain });
      await self.#run();
      return self;
    } catch (err) {
      if (self) await self.#teardown();
      certificate?.close();
      mesh.close();
      throw err;
    }
  }

  async #run(): Promise<void> {
    const opts = this.#opts;
    this.#certificate.on('rotated', (m) => {
      log.info({ notAfter: m.notAfter.toISOString() }, 'waypoint certificate rotated');
      this.#broadcast({ t: 'certificate', certificate: pushed(m) });
    });
    this.mesh.subscribe(() => this.#sendMesh());
    cluster.setupPrimary({ exec: WORKER_ENTRY, args: [], silent: false });
    const own = createMetricsRegistry();
    this.#listener = new PrimaryListener({
      limits: opts.bootstrap.limits,
      metrics: own,
      serving: () => this.#slots.flatMap((s) => (s.ready && s.worker?.isConnected() ? [s.worker] : [])),
    });
    this.#hbone = await this.#listener.listen(opts.bootstrap.listeners.hbone);

    // The first worker alone first: a configuration error is then reported once, by one worker.
    await new Promise<void>((resolve, reject) => this.#fork(0, { resolve, reject }));
    const rest = Array.from({ length: opts.concurrency - 1 }, (_, i) => i + 1);
    await Promise.all(rest.map((i) => new Promise<void>((resolve, reject) => this.#fork(i, { resolve, reject }))));

    const metrics = new WorkersRegistry(own, () => this.#collectMetrics());
    const ready = () => !this.#draining && this.readyWorkers > 0;
    this.#admin = new AdminServer({ ready, metrics, configDump: () => this.#configDump() });
    const admin = await this.#admin.listen(opts.bootstrap.listeners.admin);
    this.#readiness = opts.bootstrap.listeners.readiness ? new AdminServer({ ready }) : undefined;
    const readiness = this.#readiness ? await this.#readiness.listen(opts.bootstrap.listeners.readiness) : undefined;
    this.addresses = { hbone: this.#hbone!, admin, readiness };
    log.info({ hbone: addr(this.#hbone!), admin: addr(admin), identity: this.mesh.current.waypoint.identity, workers: opts.concurrency }, 'waypoint ready');
  }

  /** Start (or restart) worker `index`; `started` is settled by its first `ready`, `failed` or exit. */
  #fork(index: number, started?: { resolve(): void; reject(err: Error): void }): void {
    const slot = this.#slots[index] ?? (this.#slots[index] = { index, worker: undefined, ready: false, startedAt: 0, backoffMs: 0, timer: undefined, meshSeq: 0 });
    slot.timer = undefined;
    slot.ready = false;
    slot.meshSeq = this.#meshSeq;
    slot.startedAt = Date.now();
    const worker = cluster.fork({ WAYPOINT_WORKER: String(index + 1) });
    slot.worker = worker;
    let starting = started;
    const start: WorkerStart = {
      bootstrap: this.#opts.bootstrap,
      meshFile: this.#opts.meshFile,
      meshConfigFile: this.#opts.meshConfigFile,
      gateway: this.#opts.gateway,
      configFile: this.#opts.configFile,
      caDir: this.caDir,
      trustDomain: this.#trustDomain,
      certificate: pushed(this.#certificate.current),
      logLevel: log.level,
      filterModules: this.#opts.filterModules ?? [],
      hbone: { address: this.#hbone!.address, family: this.#hbone!.family, port: this.#hbone!.port },
    };
    worker.on('message', (m: FromWorker) => {
      if (m.t === 'conn-taken') return this.#listener?.taken(worker, m.id, m.taken);
      if (m.t === 'conn-closed') return this.#listener?.closed(worker, m.id);
      if (m.t === 'peer-throttled') return this.#listener?.throttled(m.ip, m.forMs);
      if (m.t === 'reply') return this.#reply(m);
      if (m.t === 'loaded') return this.#send(worker, { t: 'start', start });
      if (m.t === 'mesh-applied') {
        slot.meshSeq = Math.max(slot.meshSeq, m.seq);
        return this.#settleMeshWaiters();
      }
      if (m.t === 'ready') {
        slot.ready = true;
        // Started while draining (a restart racing a SIGTERM): drain it too.
        if (this.#stopping) this.#send(worker, { t: 'shutdown' });
        else this.#listener?.workerReady();
        if (starting) starting.resolve();
        else log.info({ worker: index + 1, workerPid: worker.process.pid }, 'worker restarted and ready');
      } else if (m.t === 'failed') {
        const err = deserializeError(m.error);
        if (starting) starting.reject(err);
        else log.error({ worker: index + 1, err: err.message }, 'worker failed to start');
      } else {
        // Not ours: a filter from filterModules talking to its embedding (cluster 'message' listeners).
        return;
      }
      starting = undefined;
    });
    worker.once('exit', (code, signal) => {
      slot.ready = false;
      if (slot.worker === worker) slot.worker = undefined;
      this.#listener?.workerGone(worker);
      this.#settleMeshWaiters();
      if (starting) {
        starting.reject(new Error(`worker ${index + 1} exited (${signal ?? `code ${code}`}) before it was ready`));
        return;
      }
      if (this.#draining) return;
      const lived = Date.now() - slot.startedAt;
      slot.backoffMs = lived < RESTART_QUICK_MS ? Math.min(Math.max(slot.backoffMs * 2, 1_000), RESTART_MAX_MS) : 0;
      log.warn({ worker: index + 1, workerPid: worker.process.pid, code, signal, restartInMs: slot.backoffMs }, 'worker exited; starting another (the other workers and their tunnels are untouched)');
      slot.timer = setTimeout(() => this.#fork(index), slot.backoffMs);
    });
  }

  #reply(m: Extract<FromWorker, { t: 'reply' }>): void {
    const p = this.#pending.get(m.id);
    if (!p) return;
    this.#pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.error !== undefined) p.reject(new Error(m.error));
    else p.resolve(m.value);
  }

  #send(worker: Worker, m: ToWorker): void {
    if (worker.isConnected()) worker.send(m);
  }

  #broadcast(m: ToWorker): void {
    for (const s of this.#slots) if (s.worker) this.#send(s.worker, m);
  }

  /** Ask one worker; rejects after ASK_TIMEOUT_MS. */
  #ask(worker: Worker, m: (id: number) => ToWorker): Promise<unknown> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`worker ${worker.id} did not answer within ${ASK_TIMEOUT_MS} ms`));
      }, ASK_TIMEOUT_MS);
      this.#pending.set(id, { resolve, reject, timer });
      this.#send(worker, m(id));
    });
  }

  async #collectMetrics(): Promise<WorkerMetrics[]> {
    const live = this.#slots.filter((s) => s.ready && s.worker);
    const answers = await Promise.allSettled(live.map((s) => this.#ask(s.worker!, (id) => ({ t: 'metrics', id }))));
    const out: WorkerMetrics[] = [];
    for (const a of answers) {
      if (a.status === 'fulfilled') out.push(a.value as WorkerMetrics);
      else log.debug({ err: (a.reason as Error).message }, 'worker metrics left out of this scrape');
    }
    return out;
  }

  /** A serving worker's config_dump, with the workers listed. */
  async #configDump(): Promise<unknown> {
    const s = this.#slots.find((x) => x.ready && x.worker);
    const dump = s ? ((await this.#ask(s.worker!, (id) => ({ t: 'config-dump', id }))) as Record<string, unknown>) : {};
    const listeners = { hbone: addr(this.addresses.hbone), admin: addr(this.addresses.admin), readiness: this.addresses.readiness && addr(this.addresses.readiness) };
    return { ...dump, bootstrap: this.#opts.bootstrap, listeners, workers: this.#slots.map((x) => ({ worker: x.index + 1, pid: x.worker?.process.pid ?? null, ready: x.ready })) };
  }

  /**
   * Graceful stop (SIGTERM): readiness turns 503 at once; new tunnels are still handed to the
   * workers for `drain.delayMs`; then the listener closes and every worker drains as a single
   * waypoint does (GOAWAY, `drain.timeoutMs` for what is in flight); then the primary stops. Idempotent.
   */
  shutdown(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#draining = true;
      const { delayMs, timeoutMs } = this.#opts.bootstrap.drain;
      log.info({ delayMs, timeoutMs, workers: this.#slots.length }, 'draining');
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
      this.#listener?.close();
      await this.#stopWorkers(timeoutMs + 5_000);
      await this.#teardown();
      this.#certificate.close();
      this.mesh.close();
      log.info('waypoint stopped');
    })();
    return this.#stopped;
  }

  /** Ask every worker to drain; kill those still running after `graceMs`. */
  async #stopWorkers(graceMs: number): Promise<void> {
    this.#stopping = true;
    const exits: Promise<void>[] = [];
    for (const s of this.#slots) {
      if (s.timer) clearTimeout(s.timer);
      s.timer = undefined;
      const w = s.worker;
      if (!w || w.isDead()) continue;
      exits.push(new Promise<void>((r) => w.once('exit', () => r())));
      this.#send(w, { t: 'shutdown' });
    }
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<void>((r) => {
      timer = setTimeout(() => {
        for (const s of this.#slots) if (s.worker && !s.worker.isDead()) s.worker.process.kill('SIGKILL');
        r();
      }, graceMs);
    });
    await Promise.race([Promise.all(exits), killed]);
    clearTimeout(timer);
  }

  /** Stop the workers at once (a failed start) and close the primary's servers. */
  async #teardown(): Promise<void> {
    this.#draining = true;
    this.#stopping = true;
    this.#listener?.close();
    for (const s of this.#slots) {
      if (s.timer) clearTimeout(s.timer);
      if (s.worker && !s.worker.isDead()) s.worker.process.kill('SIGKILL');
    }
    for (const p of this.#pending.values()) clearTimeout(p.timer);
    this.#pending.clear();
    this.#settleMeshWaiters(true);
    await Promise.all([this.#admin?.close(), this.#readiness?.close()]);
  }
}

/** The PEM material as it crosses to a worker. */
function pushed(m: WorkloadCertificate['current']): PushedCertificate {
  return { certPem: m.certPem, keyPem: m.keyPem, caPem: m.caPem, notAfter: m.notAfter.getTime() };
}
