/**
 * List and watch one kind (an informer: client-node's `ListWatch` and its cache), with what a
 * long-running waypoint needs around it:
 * - bookmarks asked for, `410 Gone` answered by a relist (ListWatch's own; deletions missed while
 *   away are then reported), a dropped or failed watch reopened from the last resourceVersion
 *   with jittered exponential backoff (ListWatch stops on an error; this restarts it);
 * - `synced` once the first list is in the cache (readiness waits for every kind);
 * - an error log naming the kind and the reason, with the missing RBAC rule for a 403;
 * - a kind the API server does not serve (404: its CRD is not installed) is logged once and
 *   treated as empty, and counts as synced, as istiod treats optional CRDs: a cluster without,
 *   say, the Gateway API must not keep the waypoint unready forever. It is listed again every
 *   `absentRetryMs`, so installing the CRD later is picked up.
 */
import { ListWatch, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';

import { Backoff, log, LogLimiter, type BackoffSettings } from '../util/index.ts';
import { BookmarkWatch, KubeApiError, listCollection, type KubeObject } from './client.ts';
import { apiVersionOf, collectionPath, fieldSelectorOf, resourceName, type WatchedKind } from './kinds.ts';

/** Retry timing: failed lists and watches back off as util's {@link Backoff} (jittered, doubling). */
export interface WatchRetry extends BackoffSettings {
  /** How often a kind the API server does not serve (404) is listed again, in ms (default 60 000). */
  readonly absentRetryMs?: number;
}

/** client-go's reflector backs off from about 1 s to 30 s; a CRD installed later is looked for every minute. */
export const DEFAULT_RETRY = Object.freeze({ initialMs: 1000, maxMs: 30_000, absentRetryMs: 60_000 }) satisfies WatchRetry;

/** The state of one watched kind (readiness, diagnostics). */
export interface KindStatus {
  readonly kind: string;
  /** `plural.group`. */
  readonly resource: string;
  /** Listed at least once, or found not served. */
  readonly synced: boolean;
  /** Not served by the API server (CRD not installed): treated as empty. */
  readonly absent: boolean;
  /** The last failure, until a list or a watch event succeeds. */
  readonly error: string | undefined;
  readonly objects: number;
}

/** What a {@link KindWatch} tells its owner. */
export interface KindHooks {
  /** Its objects changed (called once per object event). */
  changed(): void;
  /** It is synced for the first time. */
  synced(): void;
}

/** One kind, listed and watched. */
export class KindWatch {
  readonly kind: WatchedKind;
  readonly #kc: KubeConfig;
  readonly #hooks: KindHooks;
  readonly #backoff: Backoff;
  readonly #absentRetryMs: number;
  readonly #resource: string;
  readonly #limiter = new LogLimiter(60_000);
  #lw: ListWatch<KubernetesObject>;
  #stopped = true;
  #synced = false;
  #absent = false;
  #error: string | undefined;
  #retry: NodeJS.Timeout | undefined;
  #listAbort: AbortController | undefined;
  /** The request in flight, for the RBAC hint of a 403. */
  #verb: 'list' | 'watch' = 'list';

  constructor(kc: KubeConfig, kind: WatchedKind, hooks: KindHooks, retry: WatchRetry = DEFAULT_RETRY) {
    this.kind = kind;
    this.#kc = kc;
    this.#hooks = hooks;
    this.#backoff = new Backoff({ initialMs: retry.initialMs ?? DEFAULT_RETRY.initialMs, maxMs: retry.maxMs ?? DEFAULT_RETRY.maxMs });
    this.#absentRetryMs = retry.absentRetryMs ?? DEFAULT_RETRY.absentRetryMs;
    this.#resource = resourceName(kind);
    this.#lw = this.#makeListWatch();
  }

  get synced(): boolean {
    return this.#synced;
  }

  /** Start listing and watching (idempotent while running). */
  start(): void {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#run();
  }

  /** Stop: close the watch, abandon a list in flight, cancel a retry. The cache stays readable. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = undefined;
    this.#listAbort?.abort();
    await this.#lw.stop();
  }

  /** The cached objects (none while the kind is not served). */
  objects(): readonly KubeObject[] {
    return this.#absent ? [] : (this.#lw.list() as readonly object[] as readonly KubeObject[]);
  }

  status(): KindStatus {
    return { kind: this.kind.kind, resource: this.#resource, synced: this.#synced, absent: this.#absent, error: this.#error, objects: this.objects().length };
  }

  #makeListWatch(): ListWatch<KubernetesObject> {
    const k = this.kind;
    const selector = fieldSelectorOf(k);
    const watch = new BookmarkWatch(this.#kc, { opening: () => this.#opening(), event: (phase, obj) => this.#event(phase, obj) });
    const list = async () => {
      this.#verb = 'list';
      const abort = new AbortController();
      this.#listAbort = abort;
      const got = await listCollection(this.#kc, collectionPath(k), selector ? { fieldSelector: selector } : {}, abort.signal);
      this.#succeeded();
      if (this.#absent) {
        this.#absent = false;
        log.info({ kind: k.kind, resource: this.#resource }, `kube: ${this.#resource} is served now; watching ${k.kind}`);
      }
      return { ...got, items: got.items.map((o) => this.#normalize(o)) } as never;
    };
    const lw = new ListWatch(collectionPath(k), watch, list, false, undefined, selector);
    for (const verb of ['add', 'update', 'delete'] as const) lw.on(verb, () => this.#hooks.changed());
    lw.on('error', (err) => this.#failed(lw, err));
    return lw;
  }

  #run(): void {
    this.#lw.start().catch((err: unknown) => this.#failed(this.#lw, err));
  }

  /** ListWatch opens a watch only once the list is in its cache: the first one means synced. */
  #opening(): boolean {
    if (this.#stopped) return false;
    this.#verb = 'watch';
    if (!this.#synced) {
      this.#synced = true;
      log.debug({ kind: this.kind.kind, objects: this.#lw.list().length }, 'kube: listed');
      this.#hooks.synced();
    }
    return true;
  }

  #event(phase: string, obj: KubeObject): KubeObject {
    this.#succeeded();
    if (phase === 'ERROR') {
      const status = obj as { code?: number; reason?: string; message?: string };
      // 410 Gone (`Expired`): the resourceVersion is older than the server keeps; ListWatch relists.
      if (status.code === 410) log.info({ kind: this.kind.kind }, `kube: watch of ${this.#resource} expired (410 Gone: ${status.message ?? 'too old resource version'}); relisting`);
      else log.warn({ kind: this.kind.kind, code: status.code }, `kube: watch of ${this.#resource} sent an error: ${status.code ?? ''} ${status.reason ?? ''} ${status.message ?? ''}`.trim());
      return obj;
    }
    return phase === 'BOOKMARK' ? obj : this.#normalize(obj);
  }

  /** List items of built-in kinds come without apiVersion and kind; managedFields are not needed. */
  #normalize(obj: KubeObject): KubeObject {
    obj.apiVersion ??= apiVersionOf(this.kind);
    obj.kind ??= this.kind.kind;
    if (obj.metadata) delete obj.metadata.managedFields;
    return obj;
  }

  #succeeded(): void {
    this.#backoff.reset();
    this.#error = undefined;
  }

  /** ListWatch stopped on `err` (a failed list, or a watch that failed or was cut): start it again later. */
  #failed(lw: ListWatch<KubernetesObject>, err: unknown): void {
    if (this.#stopped || lw !== this.#lw) return;
    const status = err instanceof KubeApiError ? err.statusCode : (err as { statusCode?: number }).statusCode;
    if (status === 404) return this.#notServed(err);
    const reason = describe(err);
    this.#error = `${this.#verb} failed: ${reason}`;
    const delay = this.#backoff.next();
    const suppressed = this.#limiter.take(status === 403 ? 'forbidden' : 'failed');
    if (suppressed !== undefined) {
      const fields = { kind: this.kind.kind, resource: this.#resource, verb: this.#verb, status, retryMs: delay, suppressed };
      if (status === 403) log.error(fields, `kube: ${this.#verb} ${this.#resource} forbidden (403): ${reason}. ${rbacHint(this.kind, this.#verb)}`);
      else log.warn(fields, `kube: ${this.#verb} ${this.#resource} failed: ${reason}; retrying in ${delay} ms`);
    }
    this.#schedule(delay);
  }

  /** 404: the API server does not serve the kind. Treat it as empty (once logged), look again later. */
  #notServed(err: unknown): void {
    const had = this.objects().length > 0;
    if (!this.#absent) {
      this.#absent = true;
      const crd = this.kind.crd ? ` (its CustomResourceDefinition is not installed)` : '';
      log.warn(
        { kind: this.kind.kind, resource: this.#resource, retryMs: this.#absentRetryMs },
        `kube: the API server does not serve ${this.#resource}${crd}: ${describe(err)}; treating ${this.kind.kind} as empty until it does`,
      );
    }
    // A fresh cache: objects of a CRD that was deleted must not come back with its next install.
    this.#lw = this.#makeListWatch();
    if (!this.#synced) {
      this.#synced = true;
      this.#hooks.synced();
    }
    if (had) this.#hooks.changed();
    this.#schedule(this.#absentRetryMs);
  }

  #schedule(delayMs: number): void {
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      if (!this.#stopped) this.#run();
    }, delayMs);
    this.#retry.unref();
  }
}

/** An error's reason in one line: the API server's message, or the transport error's code and message. */
function describe(err: unknown): string {
  if (err instanceof KubeApiError) return err.reason ? `${err.reason}: ${err.message}` : err.message;
  const e = err as { code?: string; statusCode?: number; message?: string; cause?: { code?: string; message?: string } };
  if (e.statusCode) return `HTTP ${e.statusCode} ${e.message ?? ''}`.trim();
  const code = e.code ?? e.cause?.code;
  const message = e.cause?.message && e.cause.message !== e.message ? `${e.message}: ${e.cause.message}` : (e.message ?? String(err));
  return code && !message.includes(code) ? `${code} ${message}` : message;
}

/** The RBAC rule a 403 says is missing. */
function rbacHint(k: WatchedKind, verb: string): string {
  const scope = k.namespace ? `a Role in namespace ${k.namespace}` : 'its ClusterRole';
  const names = k.name ? `, resourceNames: ["${k.name}"]` : '';
  return `The waypoint's service account needs "${verb}" on ${resourceName(k)}${k.namespace ? '' : ' in all namespaces'}: add to ${scope} {apiGroups: ["${k.group}"], resources: ["${k.plural}"]${names}, verbs: ["get", "list", "watch"]}`;
}
