/**
 * Where a running waypoint's mesh state and certificate come from. Each mode of `waypoint run`
 * opens its own ({@link WaypointSources}): a mesh file and a local CA (file-sources.ts), or istiod
 * and the Kubernetes API (cluster-sources.ts); everything after that (src/app.ts) is the same.
 */
import type { Registry } from 'prom-client';
import type { WorkloadCertificate } from './identity/index.ts';
import type { MeshPart, MeshSnapshot, MeshStore } from './state/index.ts';

/** What a mode needs from the waypoint to open its sources. */
export interface SourceContext {
  /** The waypoint's metrics registry (the sources add theirs: certificate expiry, WDS). */
  readonly metrics: Registry;
  /** Compiled into every snapshot (src/app.ts `waypointParts`). */
  readonly parts: readonly MeshPart<unknown>[];
  /** Vets every update ({@link refuseIdentityChange}). */
  readonly accept: (next: MeshSnapshot, prev: MeshSnapshot) => string | undefined;
  /** Lifetime asked for the waypoint's certificate. */
  readonly certTtlMs: number;
  /** Aborts a wait for a source (shutdown before ready). */
  readonly signal?: AbortSignal;
  /** Told, once, how to say what readiness is still waiting for (read on each probe). */
  readonly waiting?: (why: () => string) => void;
}

/** Where the sources are, for the start-up summary and `/config_dump`. */
export type SourceOrigin =
  | { readonly mode: 'file'; readonly meshFile: string; readonly caDir: string; readonly caCreated: boolean }
  | {
      readonly mode: 'cluster';
      readonly caAddress: string;
      readonly discoveryAddress: string;
      readonly rootCertFile: string;
      readonly tokenFile: string;
      readonly apiServer: string;
    };

/** A mode's mesh store and certificate, open and current. */
export interface WaypointSources {
  readonly mesh: MeshStore;
  readonly certificate: WorkloadCertificate;
  readonly origin: SourceOrigin;
  /** Stop following the sources (after the data path has drained). Idempotent. */
  close(): Promise<void>;
}

/**
 * The waypoint's certificate cannot follow a change of its identity or trust domain: such an
 * update is refused (the last good snapshot stays) and a restart takes it.
 */
export function refuseIdentityChange(next: MeshSnapshot, prev: MeshSnapshot): string | undefined {
  if (next.waypoint.identity !== prev.waypoint.identity) {
    return `the waypoint's identity would change from ${prev.waypoint.identity} to ${next.waypoint.identity}; restart the waypoint to take a new identity`;
  }
  if (next.meshConfig.trustDomain !== prev.meshConfig.trustDomain) {
    return `the trust domain would change from ${prev.meshConfig.trustDomain} to ${next.meshConfig.trustDomain}; restart the waypoint with a certificate of that trust domain`;
  }
  return undefined;
}

/** `p`, or a rejection with the signal's reason when it aborts first. */
export function unlessAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const aborted = () => reject(signal.reason as Error);
    signal.addEventListener('abort', aborted, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', aborted);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', aborted);
        reject(err as Error);
      },
    );
  });
}
