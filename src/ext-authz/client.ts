/**
 * The ext_authz client: asks the provider a CUSTOM policy names whether a request (or a TCP
 * connection) may go on, as Envoy's ext_authz filters do under Istio (istio/istio
 * pilot/pkg/security/authz/builder/extauthz.go):
 *
 *   const extAuthz = new ExtAuthzClient({ dial: (ep, use) => clusterManager.openTcp(ep, use) });
 *   const outcome = await extAuthz.check(snapshot, result.custom.provider, input);
 *   if (!outcome.allow) → local reply outcome.status / headers / body, response flag UAEX
 *   else → apply outcome.headersToUpstream / headersToRemove, later headersToDownstream
 *
 * - The provider's `service` is looked up in the snapshot (see `endpoints.ts`) and one of its
 *   healthy endpoints on `port` is called directly, round-robin, over a stream from `dial` (HBONE
 *   for mesh workloads, plain TCP for `dataplane-mode: none` ones): gRPC
 *   `envoy.service.auth.v3.Authorization/Check` with `:authority`
 *   `outbound_.<port>_._.<hostname>` (istiod's cluster name with `|` → `_.`), or an HTTP request.
 * - `timeout` (default 600 s) bounds the whole call, connection included.
 * - Server said OK → allowed; denied → `denied`; no answer, transport failure, timeout, a gRPC
 *   error status, an HTTP 5xx, an unknown service or no healthy endpoint → `failOpen` ? allowed
 *   (`reason: 'failed-open'`) : denied with `statusOnError` (default 403), empty body,
 *   `reason: 'error'`. Both denials carry flag `UAEX`.
 * - A provider entry the client cannot use (bad `timeout`, ...) denies with 403, `reason: 'error'`
 *   (istiod turns a broken provider into deny rules).
 *
 * Connections are pooled per endpoint (h2c sessions for gRPC, keep-alive HTTP/1.1 for HTTP) and
 * closed after `idleTimeoutMs` without requests; {@link prune} drops pools of endpoints that left
 * the mesh, {@link close} closes all.
 */
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import type { Pool } from 'undici';
import { DEFAULT_HTTP2, type Http2Params } from '../hbone/index.ts';
import { ResponseFlag } from '../pipeline/index.ts';
import { definePart, type Endpoint, type MeshSnapshot } from '../state/index.ts';
import { H2Upstream } from '../upstream/index.ts';
import { log } from '../util/index.ts';
import { buildCheckRequest } from './check-request.ts';
import { outcomeFromCheckResponse, outcomeFromHttpAnswer } from './check-response.ts';
import { ExtAuthzConfigError, parseProviderSettings, type BodySettings, type ProviderSettings } from './config.ts';
import { endpointKey, findProviderService, providerEndpoints, RoundRobin } from './endpoints.ts';
import { unaryCall } from './grpc-call.ts';
import { h2Call, http1Call, http1Pool } from './http-call.ts';
import { buildHttpCheckRequest } from './http-request.ts';
import { CHECK_METHOD_PATH, CheckRequestSchema, CheckResponseSchema } from './proto.ts';
import type { CheckDenied, CheckInput, CheckOutcome, Dial } from './types.ts';

export interface ExtAuthzClientOptions {
  readonly dial: Dial;
  /** HTTP/2 settings of h2c sessions to providers; default ztunnel's (`DEFAULT_HTTP2`). */
  readonly http2?: Http2Params;
  /** Close a provider connection idle this long (ms); default 60 000. */
  readonly idleTimeoutMs?: number;
}

/** A declared ext_authz provider, ready to be called (or not, see `error`). */
export interface ExtAuthzProvider {
  readonly name: string;
  readonly kind: 'grpc' | 'http';
  /** Why the client cannot use the entry; its checks deny with 403. */
  readonly error?: string;
  /** Parsed settings (undefined with `error`). */
  readonly settings?: ProviderSettings;
  /**
   * `includeRequestBodyInCheck`: buffer the request body before checking. The filter buffers up to
   * `maxRequestBytes`; when the body is larger and `allowPartialMessage` is false it answers 413
   * without checking (Envoy, even with `failOpen`), otherwise it checks with what it buffered.
   */
  readonly body?: BodySettings;
}

const ERROR_DENIAL = { headers: [], body: '', reason: 'error', responseFlag: ResponseFlag.UnauthorizedExternalService, details: 'ext_authz_error' } as const;

/** The answer Envoy gives when the check itself failed. */
export function errorOutcome(settings: Pick<ProviderSettings, 'failOpen' | 'statusOnError'>, error: string): CheckOutcome {
  if (settings.failOpen) return { allow: true, reason: 'failed-open', error, headersToUpstream: [], headersToRemove: [], headersToDownstream: [] };
  return { allow: false, status: settings.statusOnError, error, ...ERROR_DENIAL } satisfies CheckDenied;
}

/** Parse every ext_authz entry of the snapshot's MeshConfig `extensionProviders`. */
export function readProviders(snapshot: MeshSnapshot): ReadonlyMap<string, ExtAuthzProvider> {
  const out = new Map<string, ExtAuthzProvider>();
  const list = snapshot.meshConfig.raw.extensionProviders;
  if (!Array.isArray(list)) return out;
  for (const entry of list) {
    const e = entry as Record<string, unknown> | null;
    if (typeof e?.name !== 'string' || (!e.envoyExtAuthzGrpc && !e.envoyExtAuthzHttp)) continue;
    const kind = e.envoyExtAuthzGrpc ? 'grpc' : 'http';
    try {
      const settings = parseProviderSettings(e);
      if (settings) out.set(e.name, { name: e.name, kind, settings, ...(settings.body ? { body: settings.body } : {}) });
    } catch (err) {
      if (!(err instanceof ExtAuthzConfigError)) throw err;
      out.set(e.name, { name: e.name, kind, error: err.message });
    }
  }
  return out;
}

/** The ext_authz providers of the MeshConfig, parsed: a compiled part of every mesh snapshot (it never refuses one: a bad entry denies its checks). */
export const EXT_AUTHZ_PROVIDERS = definePart<ReadonlyMap<string, ExtAuthzProvider>>('extAuthzProviders', { compile: readProviders });

interface Pools {
  grpc?: H2Upstream;
  h2?: H2Upstream;
  http1?: Pool;
}

export class ExtAuthzClient {
  private readonly dial: Dial;
  private readonly http2: Http2Params;
  private readonly idleTimeoutMs: number;
  private readonly pools = new Map<string, Pools>();
  private readonly rr = new RoundRobin();
  private closed = false;

  constructor(opts: ExtAuthzClientOptions) {
    this.dial = opts.dial;
    this.http2 = opts.http2 ?? DEFAULT_HTTP2;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? 60_000;
  }

  /** The ext_authz providers of `snapshot`'s MeshConfig, by name (its {@link EXT_AUTHZ_PROVIDERS} part). */
  providers(snapshot: MeshSnapshot): ReadonlyMap<string, ExtAuthzProvider> {
    return snapshot.part(EXT_AUTHZ_PROVIDERS);
  }

  /** One provider of `snapshot`, or undefined when not declared. */
  provider(snapshot: MeshSnapshot, name: string): ExtAuthzProvider | undefined {
    return this.providers(snapshot).get(name);
  }

  /**
   * Check `input` with provider `name` of `snapshot`. Never rejects. An undeclared provider (the
   * engine never asks for one) denies with 403, `reason: 'error'`.
   */
  async check(snapshot: MeshSnapshot, name: string, input: CheckInput): Promise<CheckOutcome> {
    const provider = this.provider(snapshot, name);
    if (!provider || !provider.settings) {
      const error = provider?.error ?? `extension provider ${name} is not an ext_authz provider of this mesh`;
      return { allow: false, status: 403, error, ...ERROR_DENIAL };
    }
    const s = provider.settings;
    const service = findProviderService(snapshot, s.service);
    if (!service) return errorOutcome(s, `ext_authz service ${s.service} not found in the mesh`);
    const ep = this.rr.pick(providerEndpoints(service, s.port));
    if (!ep) return errorOutcome(s, `no healthy endpoint for ext_authz service ${s.service}:${s.port}`);
    if (this.closed) return errorOutcome(s, 'ext_authz client closed');
    const started = Date.now();
    try {
      if (s.kind === 'grpc') {
        const authority = `outbound_.${s.port}_._.${service.hostname}`;
        const req = toBinary(CheckRequestSchema, buildCheckRequest(input, s.body));
        const res = await unaryCall(this.pools_(ep).grpc!, authority, CHECK_METHOD_PATH, req, s.timeoutMs);
        if (!res.ok) return this.failed(s, `gRPC status ${res.code}${res.message ? `: ${res.message}` : ''}`);
        return outcomeFromCheckResponse(fromBinary(CheckResponseSchema, res.message));
      }
      if (!input.http) return this.failed(s, 'an HTTP ext_authz provider cannot check a TCP connection');
      const req = buildHttpCheckRequest(input, s);
      const port = service.ports.find((p) => p.port === s.port);
      const h2 = port?.protocol === 'HTTP2' || port?.protocol === 'GRPC';
      const signal = AbortSignal.timeout(s.timeoutMs);
      const pools = this.pools_(ep, h2 ? 'h2' : 'http1');
      const answer = await (h2 ? h2Call(pools.h2!, req, signal) : http1Call(pools.http1!, req, signal));
      return outcomeFromHttpAnswer(answer, s) ?? this.failed(s, `HTTP ${answer.status} from the authorization server`);
    } catch (err) {
      const e = err as Error;
      const timedOut = e.name === 'TimeoutError' || Date.now() - started >= s.timeoutMs;
      return this.failed(s, timedOut ? `no answer within ${s.timeoutMs} ms` : e.message);
    }
  }

  /** Drop the connections of endpoints that are no longer in `snapshot`. */
  prune(snapshot: MeshSnapshot): void {
    const live = new Set<string>();
    for (const svc of snapshot.services) for (const eps of svc.endpoints.values()) for (const ep of eps) live.add(endpointKey(ep));
    for (const [key, pools] of this.pools) {
      if (live.has(key)) continue;
      this.pools.delete(key);
      void closePools(pools);
    }
  }

  /** Close every connection; later checks fail (`failOpen` / `statusOnError`). */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.allSettled(all.map(closePools));
  }

  private failed(s: ProviderSettings, error: string): CheckOutcome {
    log.debug({ provider: s.name, error }, 'ext_authz: check failed');
    return errorOutcome(s, error);
  }

  private pools_(ep: Endpoint, kind: 'grpc' | 'h2' | 'http1' = 'grpc'): Pools {
    const key = endpointKey(ep);
    let pools = this.pools.get(key);
    if (!pools) this.pools.set(key, (pools = {}));
    if (kind === 'http1') {
      pools.http1 ??= http1Pool(ep, this.dial, this.idleTimeoutMs);
    } else {
      const slot = kind === 'grpc' ? 'grpc' : 'h2';
      pools[slot] ??= new H2Upstream({
        authority: ep.authority,
        open: () => this.dial(ep, 'h2'),
        http2: this.http2,
        idleTimeoutMs: this.idleTimeoutMs,
        maxStreamsPerSession: this.http2.maxConcurrentStreams,
      });
    }
    return pools;
  }
}

async function closePools(p: Pools): Promise<void> {
  await Promise.allSettled([p.grpc?.close(), p.h2?.close(), p.http1?.close()]);
}
