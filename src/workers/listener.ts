/**
 * The HBONE listener of `waypoint run --concurrency N`, owned by the primary: it accepts each TCP
 * connection, applies the per-client connection limits (`limits.maxConnectionsPerPeer` and the
 * peer connection rate, one count for all the workers) and hands the socket to a worker in turn,
 * which does the TLS handshake and serves it. The primary keeps its copy of the socket until the
 * worker says it took it; one that did not (draining, or gone) is handed to another worker, or
 * closed when none is left. So a connection is always served or closed, never left waiting: with
 * node:cluster's round-robin, a connection handed to a worker that was closing its listener was
 * sent back to a round-robin handle already closed (lib/internal/cluster/round_robin_handle.js
 * `distribute` after `remove`) and kept open unserved until the primary exited.
 *
 * The drain closes this listener once, from the primary, after `drain.delayMs` (new tunnels are
 * accepted until then, as in one process and Istio's drain); the kernel then refuses new
 * connections, as for one process whose listener closed.
 */
import net, { type AddressInfo, type Socket } from 'node:net';
import type { Worker } from 'node:cluster';
import type { Registry } from 'prom-client';
import { HboneListenerStats, PeerLimits, type PeerLimitSettings } from '../hbone/index.ts';
import { formatHostPort, normalizeIp } from '../state/index.ts';
import { listenOn, LogLimiter, log } from '../util/index.ts';
import type { ToWorker } from './protocol.ts';

/** A connection handed to a worker: the primary's socket until the worker took it, then its client for the count. */
interface HandedOver {
  readonly ip: string;
  worker: Worker;
  /** The primary's copy, until the worker answers `conn-taken`. */
  socket: Socket | undefined;
  /** Workers that would not take it: once every serving worker did, it is closed. */
  declined: number;
}

export interface PrimaryListenerOptions {
  /** The client limits that count connections (the stream rate is each worker's). */
  readonly limits: PeerLimitSettings;
  /** The primary's own registry (merged with the workers' at a scrape): connections refused here are counted in it. */
  readonly metrics: Registry;
  /** The workers serving now, in a stable order (connections go to them in turn). */
  serving(): readonly Worker[];
}

export class PrimaryListener {
  readonly #opts: PrimaryListenerOptions;
  readonly #server: net.Server;
  readonly #limits: PeerLimits;
  readonly #handed = new Map<number, HandedOver>();
  /** Accepted while no worker serves (the start, or every worker restarting): handed over when one does. */
  readonly #waiting: { socket: Socket; ip: string }[] = [];
  readonly #warnings = new LogLimiter();
  #stats: HboneListenerStats | undefined;
  #nextId = 1;
  /** Round-robin position of the next connection. */
  #turn = 0;
  #closed = false;

  constructor(opts: PrimaryListenerOptions) {
    this.#opts = opts;
    // The connection limits; the stream budgets are the workers' (they tell `throttled`).
    this.#limits = new PeerLimits(opts.limits);
    // pauseOnConnect: the bytes are the worker's to read. noDelay is the socket's, whichever process holds it.
    this.#server = net.createServer({ pauseOnConnect: true, noDelay: true }, (socket) => this.#accepted(socket));
  }

  /** Bind `ip:port`; rejects on bind errors (EADDRINUSE...) as one waypoint's listener does. */
  async listen(hostPort: string): Promise<AddressInfo> {
    const bound = await listenOn(this.#server, hostPort);
    this.#stats = new HboneListenerStats(this.#opts.metrics, formatHostPort(bound.address, bound.port));
    return bound;
  }

  /** Connections handed over and not closed yet (tests, config_dump). */
  get connections(): number {
    return this.#handed.size;
  }

  #accepted(socket: Socket): void {
    const ip = normalizeIp(socket.remoteAddress ?? '') ?? '';
    if (this.#closed) return void socket.destroy();
    const refusal = this.#limits.opened(ip);
    if (refusal) {
      this.#stats?.connectionRefused(refusal);
      this.#warnings.warn(`refused:${refusal}`, { server: 'waypoint', remote: formatHostPort(ip, socket.remotePort ?? 0), reason: refusal }, 'HBONE connection refused: client over its limits');
      socket.destroy();
      return;
    }
    // An error on the primary's paused copy (a reset before it was handed over) is the worker's to see, or nobody's.
    socket.on('error', () => {});
    this.#handOver(socket, ip, 0);
  }

  #handOver(socket: Socket, ip: string, declined: number, id = this.#nextId++): void {
    const serving = this.#opts.serving();
    const worker = serving.length > 0 ? serving[this.#turn++ % serving.length] : undefined;
    if (!worker) {
      this.#waiting.push({ socket, ip });
      return;
    }
    this.#handed.set(id, { ip, worker, socket, declined });
    const m: ToWorker = { t: 'conn', id };
    worker.send(m, socket, { keepOpen: true }, (err) => {
      // The channel closed under it: the worker's exit hands it on (workerGone).
      if (err) log.debug({ err: err.message, worker: worker.id }, 'HBONE connection not handed over');
    });
  }

  /** A worker answered `conn`: drop the primary's copy, or hand it to the next worker. */
  taken(worker: Worker, id: number, taken: boolean): void {
    const h = this.#handed.get(id);
    if (!h?.socket || h.worker !== worker) return;
    const socket = h.socket;
    if (taken) {
      h.socket = undefined;
      // Closes this process's descriptor only: the worker's keeps the connection.
      socket.destroy();
      return;
    }
    this.#handed.delete(id);
    this.#retry(socket, h.ip, h.declined + 1, id);
  }

  /** A connection a worker took closed. */
  closed(worker: Worker, id: number): void {
    const h = this.#handed.get(id);
    if (!h || h.worker !== worker) return;
    this.#handed.delete(id);
    this.#limits.closed(h.ip);
  }

  /** A worker throttled client `ip`: its new connections are refused for `forMs`, whichever worker they would go to. */
  throttled(ip: string, forMs: number): void {
    this.#limits.block(ip, forMs);
  }

  /** A worker exited: its connections are gone; those it had not taken yet go to another worker. */
  workerGone(worker: Worker): void {
    for (const [id, h] of this.#handed) {
      if (h.worker !== worker) continue;
      this.#handed.delete(id);
      if (h.socket) this.#retry(h.socket, h.ip, h.declined, id);
      else this.#limits.closed(h.ip);
    }
  }

  /** A worker serves (again): the connections that waited for one are handed over. */
  workerReady(): void {
    const waiting = this.#waiting.splice(0);
    for (const w of waiting) this.#handOver(w.socket, w.ip, 0);
  }

  #retry(socket: Socket, ip: string, declined: number, id: number): void {
    if (this.#closed || socket.destroyed || declined >= Math.max(1, this.#opts.serving().length)) {
      socket.destroy();
      this.#limits.closed(ip);
      return;
    }
    this.#handOver(socket, ip, declined, id);
  }

  /**
   * Stop accepting (the drain, after `drain.delayMs`): new connections are refused by the kernel;
   * those waiting for a worker are closed. Connections being handed over are still served or closed.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#server.close();
    for (const w of this.#waiting.splice(0)) {
      w.socket.destroy();
      this.#limits.closed(w.ip);
    }
  }
}
