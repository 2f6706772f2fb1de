/**
 * The Kubernetes API client pieces the watchers use, on `@kubernetes/client-node`'s configuration
 * (in-cluster service account, or KUBECONFIG): loading that configuration with a clear error when
 * there is none, listing a collection as plain JSON, and its `Watch` with bookmarks asked for.
 */
import http from 'node:http';
import https from 'node:https';

import { KubeConfig, Watch } from '@kubernetes/client-node';

/** Where the in-cluster configuration reads the service account token. */
const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/**
 * The client configuration: `file` when given, else the standard one (`KUBECONFIG`, else
 * `~/.kube/config`, else the pod's service account and `KUBERNETES_SERVICE_HOST`).
 * @throws Error when there is none (the client would otherwise try `http://localhost:8080`).
 */
export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file !== undefined) kc.loadFromFile(file);
  else kc.loadFromDefault();
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error(`no current cluster in the Kubernetes client configuration${file ? ` ${file}` : ''} (check current-context)`);
  if (file === undefined && !process.env.KUBECONFIG && cluster.server === 'http://localhost:8080' && cluster.name === 'cluster') {
    throw new Error(
      `no Kubernetes API configuration: not in a pod (no service account token at ${SERVICE_ACCOUNT_TOKEN}), KUBECONFIG unset and no ~/.kube/config`,
    );
  }
  return kc;
}

/** A failed API request: the HTTP status and the API server's `Status` reason and message. */
export class KubeApiError extends Error {
  /** HTTP status (403, 404, 410, ...). */
  readonly statusCode: number;
  /** `Status.reason` (`Forbidden`, `NotFound`, `Expired`, ...), when the server sent a Status. */
  readonly reason: string | undefined;
  constructor(statusCode: number, reason: string | undefined, message: string) {
    super(message);
    this.name = 'KubeApiError';
    this.statusCode = statusCode;
    this.reason = reason;
  }
}

/** A Kubernetes object as JSON. */
export type KubeObject = Record<string, unknown> & { metadata?: Record<string, unknown> };

/** A list response: `metadata.resourceVersion` and the `items`. */
export interface KubeList {
  readonly metadata?: { readonly resourceVersion?: string };
  readonly items: KubeObject[];
}

/** Longest a list request may take. */
const LIST_TIMEOUT_MS = 60_000;

/**
 * GET the collection at `path` (with `query`) as JSON.
 * @throws KubeApiError for a non-2xx answer; the transport error otherwise.
 */
export async function listCollection(kc: KubeConfig, path: string, query: Readonly<Record<string, string>>, signal: AbortSignal): Promise<KubeList> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('no current cluster in the Kubernetes client configuration');
  const url = new URL(cluster.server + path);
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
  const opts: https.RequestOptions = { method: 'GET', timeout: LIST_TIMEOUT_MS, signal };
  await kc.applyToHTTPSOptions(opts);
  opts.headers = { ...opts.headers, accept: 'application/json' };
  const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = (url.protocol === 'http:' ? http : https).request(url, opts, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer in ${LIST_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
  if (status < 200 || status > 299) throw apiError(status, body);
  const list = JSON.parse(body) as KubeList;
  if (!Array.isArray(list.items)) throw new Error(`the answer to GET ${path} has no items list`);
  return list;
}

/** The error of a non-2xx answer: its `Status` message when it is one, else the body's first line. */
export function apiError(status: number, body: string): KubeApiError {
  try {
    const s = JSON.parse(body) as { kind?: string; message?: string; reason?: string };
    if (s.kind === 'Status') return new KubeApiError(status, s.reason, s.message ?? `HTTP ${status}`);
  } catch {
    // not JSON: `404 page not found` and the like
  }
  const line = body.split('\n')[0].trim();
  return new KubeApiError(status, undefined, line ? `HTTP ${status}: ${line}` : `HTTP ${status}`);
}

/** What {@link BookmarkWatch} tells its owner. */
export interface WatchHooks {
  /** A watch is about to be opened; false: the owner stopped, open nothing. */
  opening(): boolean;
  /** An event arrived; returns the object to pass on (or the same one). */
  event(phase: string, obj: KubeObject): KubeObject;
}

/** Server-side watch timeout as client-go picks it: 5 to 10 minutes, so reconnects spread out. */
const watchTimeoutSeconds = (): number => Math.floor(300 * (1 + Math.random()));

/**
 * client-node's `Watch` asking for bookmarks (`allowWatchBookmarks`: the server then sends the
 * current resourceVersion now and then, so a reconnect resumes from a recent one instead of
 * hitting `410 Gone`) and a server-side timeout; an error before the request (an unreadable token
 * file) is reported through `done` instead of a rejection nobody awaits.
 */
export class BookmarkWatch extends Watch {
  readonly #hooks: WatchHooks;

  constructor(kc: KubeConfig, hooks: WatchHooks) {
    super(kc);
    this.#hooks = hooks;
  }

  override async watch(
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: (phase: string, apiObj: KubeObject, watchObj?: unknown) => void,
    done: (err: unknown) => void,
  ): Promise<AbortController> {
    if (!this.#hooks.opening()) return new AbortController();
    const params = { ...queryParams, allowWatchBookmarks: true, timeoutSeconds: watchTimeoutSeconds() };
    try {
      return await super.watch(path, params, (phase, obj: KubeObject, raw) => callback(phase, this.#hooks.event(phase, obj), raw), done);
    } catch (err) {
      done(err);
      return new AbortController();
    }
  }
}
