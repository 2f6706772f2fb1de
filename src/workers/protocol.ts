/**
 * The messages between the primary and its workers (node:cluster IPC, structured clone), and the
 * error a worker's failed start is carried back in: a ConfigError keeps its file position, a bind
 * error its code and address, so the primary's caller reports them as a single process would.
 */
import type { BootstrapConfig } from '../config/index.ts';
import { ConfigError, type ConfigLocation } from '../util/index.ts';

/** PEM material of the waypoint's certificate, as pushed to workers (`notAfter` as ms since the epoch). */
export interface PushedCertificate {
  readonly certPem: string;
  readonly keyPem: string;
  readonly caPem: string;
  readonly notAfter: number;
}

/** What a worker needs to start its waypoint: the primary's resolved inputs and certificate. */
export interface WorkerStart {
  readonly bootstrap: BootstrapConfig;
  readonly meshFile: string;
  readonly meshConfigFile: string | undefined;
  readonly gateway: string | undefined;
  readonly configFile: string | undefined;
  readonly caDir: string;
  /** Trust domain of the primary's CA (the worker checks it against the mesh as a single process does). */
  readonly trustDomain: string;
  readonly certificate: PushedCertificate;
  readonly logLevel: string;
  /** The HBONE address the primary listens on: the worker serves the connections it is handed (`conn`) and binds none. */
  readonly hbone: { readonly address: string; readonly family: string; readonly port: number };
  /** Modules whose `filterFactories` export the worker adds to its filters (WorkersOptions.filterModules in primary.ts). */
  readonly filterModules: readonly string[];
}

/** Primary → worker. */
export type ToWorker =
  | { readonly t: 'start'; readonly start: WorkerStart }
  /** A renewed certificate. */
  | { readonly t: 'certificate'; readonly certificate: PushedCertificate }
  /** The mesh files changed (the primary published a new snapshot): read and compile them again, then answer `mesh-applied` with `seq`. */
  | { readonly t: 'mesh'; readonly seq: number }
  /**
   * An HBONE connection the primary accepted, sent with the message (its socket; the primary keeps
   * its copy until the answer `conn-taken`).
   */
  | { readonly t: 'conn'; readonly id: number }
  /** Graceful stop: drain (at once: the primary waited `drain.delayMs` and closed the listener), then exit. */
  | { readonly t: 'shutdown' }
  /** Requests answered by `reply` with the same id. */
  | { readonly t: 'metrics'; readonly id: number }
  | { readonly t: 'config-dump'; readonly id: number };

/** Worker → primary. */
export type FromWorker =
  /** The worker's code is loaded and listens for messages (sooner, 'online', the `start` would be lost). */
  | { readonly t: 'loaded' }
  | { readonly t: 'ready' }
  /** Answer to `conn`: `taken` when the worker serves it, false when it cannot (draining): the primary hands it to another or closes it. */
  | { readonly t: 'conn-taken'; readonly id: number; readonly taken: boolean }
  /** A connection the worker took closed (the primary's per-client count). */
  | { readonly t: 'conn-closed'; readonly id: number }
  /** The worker throttled client `ip` (stream rate, rapid reset): the primary refuses its new connections for `forMs`. */
  | { readonly t: 'peer-throttled'; readonly ip: string; readonly forMs: number }
  | { readonly t: 'failed'; readonly error: SerializedError }
  /** The `mesh` message `seq` (and every one before it) is applied: the worker serves with what the files said then. */
  | { readonly t: 'mesh-applied'; readonly seq: number }
  | { readonly t: 'reply'; readonly id: number; readonly value?: unknown; readonly error?: string };

/** An Error as it crosses the IPC channel. */
export interface SerializedError {
  readonly name: string;
  readonly message: string;
  readonly code?: string;
  readonly address?: string;
  readonly port?: number;
  readonly hostname?: string;
  readonly syscall?: string;
  /** Set for a ConfigError. */
  readonly location?: ConfigLocation;
}

type ErrnoLike = Error & { code?: unknown; address?: unknown; port?: unknown; hostname?: unknown; syscall?: unknown };

export function serializeError(err: unknown): SerializedError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err) };
  const e = err as ErrnoLike;
  const out: { -readonly [K in keyof SerializedError]: SerializedError[K] } = { name: e.name, message: e.message };
  if (typeof e.code === 'string') out.code = e.code;
  if (typeof e.address === 'string') out.address = e.address;
  if (typeof e.port === 'number') out.port = e.port;
  if (typeof e.hostname === 'string') out.hostname = e.hostname;
  if (typeof e.syscall === 'string') out.syscall = e.syscall;
  if (err instanceof ConfigError) out.location = { ...err.location };
  return out;
}

/** The Error a worker reported, rebuilt in the primary (a ConfigError stays one). */
export function deserializeError(s: SerializedError): Error {
  if (s.location) return new ConfigError(s.message, s.location);
  const err = new Error(s.message) as ErrnoLike;
  err.name = s.name;
  for (const k of ['code', 'address', 'port', 'hostname', 'syscall'] as const) if (s[k] !== undefined) err[k] = s[k];
  return err;
}
