/**
 * `istio.authz`: Istio's AuthorizationPolicy enforcement at the waypoint, on the engine of
 * src/authz (semantics: istio.io's AuthorizationPolicy reference). One filter plays the parts
 * Istio's waypoint splits over Envoy's HTTP RBAC (per request), network RBAC (per connection),
 * ext_authz (CUSTOM) and jwt_authn, driven by one compiled policy set per mesh snapshot; hence an
 * Istio name. Behaviour and metrics: filters/README.md.
 *
 * - HTTP (`onRequestHeaders`): on the path the connection manager normalized (`stream.path`),
 *   CUSTOM, JWT, DENY, ALLOW with the current snapshot; a denial is 403
 *   `RBAC: access denied` (gRPC: status 7). Header changes (ext_authz allow, JWT output) are made
 *   to `stream.requestHeaders` (request.ts).
 * - TCP (`onConnection`, declared non-HTTP ports): decided at CONNECT; a denial answers it 401, as
 *   ztunnel does for L4 denials. Undeclared ports: the TCP decision applies only should the
 *   payload be TCP (`conn.rejectIfTcp`). Open TCP tunnels are re-decided on every new snapshot and
 *   closed when now denied, as ztunnel drains them.
 * - NetworkPolicy mode (option `networkPolicy`): the destination pods' ingress NetworkPolicies,
 *   evaluated against the original client (src/netpol), after the AuthorizationPolicies allow.
 *
 * Source attributes come from the tunnel, never from request headers (the principal is the HBONE
 * client certificate's SPIFFE id); only `remote.ip` reads `X-Forwarded-For`.
 */
import type { RequestAuthenticator, RequestAuthn } from '../../src/authn/index.ts';
import {
  AUTHZ_RESULT,
  REQUEST_JWT,
  TCP_AUTHZ_RESULT,
  authzFor,
  headersFromRaw,
  matchPath,
  rbacDeniedDetails,
  type AuthzResult,
  type CustomCheck,
  type ExtAuthzDecision,
  type ExtAuthzHook,
  type HeaderMutation,
  type RequestAttributes,
} from '../../src/authz/index.ts';
import { STREAM_ADMISSION, decideTunnel, requestAdmission } from '../../src/netpol/index.ts';
import {
  FilterStatus,
  ResponseFlag,
  defineSlot,
  isHttpProtocol,
  sendLocalReply,
  type ConnectionContext,
  type Filter,
  type FilterEnv,
  type FilterFactory,
  type HeaderList,
  type PhaseResult,
  type StreamContext,
} from '../../src/pipeline/index.ts';
import type { MeshSnapshot, Target } from '../../src/state/index.ts';
import {
  RBAC_DENIED_BODY,
  applyResponseMutations,
  connectionAttributes,
  editRequestHeaders,
  enforceDecision,
  localReply,
  remoteAddress,
  unavailableProviderDetails,
} from './request.ts';
import { authzStatsFor, type AuthzStats, type ExtAuthzStat } from './stats.ts';

export { RBAC_DENIED_BODY, applyResponseMutations, remoteAddress } from './request.ts';

/** The filter's name in the bootstrap `filters:` list. */
export const AUTHZ_FILTER_NAME = 'istio.authz';

/** The CONNECT status of an L4 denial (ztunnel's). */
export const L4_DENIED_STATUS = 401;

/** The filter takes no configuration (policies come from mesh state). */
export type AuthzFilterConfig = Readonly<Record<string, never>>;

/** What the factory can be given by the code that builds the chain. */
export interface AuthzFilterOptions {
  /** The ext_authz client for CUSTOM policies; without it, matching CUSTOM rules deny. */
  readonly extAuthz?: ExtAuthzHook;
  /**
   * RequestAuthentication (JWT), run after CUSTOM and before AUDIT/DENY/ALLOW (Istio's order);
   * without it no token is validated here (`requestPrincipals` read the `REQUEST_JWT` slot).
   */
  readonly authn?: RequestAuthn;
  /**
   * The NetworkPolicy mode (bootstrap `networkPolicy.enforceOnOriginalIdentity`): after the
   * AuthorizationPolicies allowed it, a TCP tunnel is refused (CONNECT 401, flag `DENY`) when no
   * candidate endpoint's ingress NetworkPolicies admit the original client, and an HTTP request
   * carries the admission its endpoint pick honours (src/netpol/enforce.ts).
   */
  readonly networkPolicy?: boolean;
}

/** Response header changes an allowing ext_authz server asked for. */
const RESPONSE_HEADER_EDITS = defineSlot<readonly HeaderMutation[]>('istio.authz.response_headers', 'stream');
/** A TCP tunnel the CUSTOM provider allowed (not asked again on policy re-checks). */
const TCP_CUSTOM_ALLOWED = defineSlot<boolean>('istio.authz.tcp_custom_allowed', 'connection');
/** Headers of a local reply this filter sent (ext_authz denial, JWT rejection). */
const LOCAL_REPLY_HEADERS = defineSlot<readonly (readonly [string, string])[]>('istio.authz.local_reply_headers', 'stream');

/** Build the factory; the registered default ({@link authzFactory}) has no ext_authz hook. */
export function authzFilterFactory(opts: AuthzFilterOptions = {}): FilterFactory<AuthzFilterConfig> {
  return {
    name: AUTHZ_FILTER_NAME,
    parseConfig(raw) {
      if (raw !== undefined && raw !== null && (typeof raw !== 'object' || Array.isArray(raw) || Object.keys(raw).length > 0)) {
        throw new Error('istio.authz takes no configuration (AuthorizationPolicies come from the mesh state)');
      }
      return Object.freeze({});
    },
    create: (_config, env) => new AuthzFilter(env, opts.extAuthz, opts.authn, opts.networkPolicy === true),
  };
}

/** `istio.authz` without an ext_authz client (CUSTOM rules that match deny). */
export const authzFactory: FilterFactory<AuthzFilterConfig> = authzFilterFactory();

class AuthzFilter implements Filter {
  readonly name = AUTHZ_FILTER_NAME;
  private readonly env: FilterEnv;
  private readonly extAuthz: ExtAuthzHook | undefined;
  private readonly authn: RequestAuthn | undefined;
  private readonly networkPolicy: boolean;
  private readonly stats: AuthzStats;
  /** Tunnels whose TCP decision may need revisiting when policies change. */
  private readonly tunnels = new Set<ConnectionContext>();
  private unsubscribe: (() => void) | undefined;
  private warnedNoHook = false;

  constructor(env: FilterEnv, extAuthz: ExtAuthzHook | undefined, authn: RequestAuthn | undefined, networkPolicy: boolean) {
    this.env = env;
    this.extAuthz = extAuthz;
    this.authn = authn;
    this.networkPolicy = networkPolicy;
    this.stats = authzStatsFor(env.metrics);
  }

  // --- TCP ------------------------------------------------------------------------------------

  onConnection(conn: ConnectionContext): PhaseResult {
    if (isHttpProtocol(conn.protocol)) return FilterStatus.Continue; // decided per request
    this.track(conn);
    const denied = this.decideL4(conn, conn.mesh, conn.target);
    if (denied === undefined) return FilterStatus.Continue;
    if (typeof denied === 'string') return this.refuse(conn, denied);
    return denied.then((d) => (d === undefined ? FilterStatus.Continue : this.refuse(conn, d)));
  }

  onConnectionComplete(conn: ConnectionContext): void {
    this.untrack(conn);
  }

  /** Refuse a tunnel now (declared TCP port: CONNECT 401) or should it carry TCP (undeclared port). */
  private refuse(conn: ConnectionContext, details: string): FilterStatus {
    if (conn.protocol === 'UNKNOWN') {
      conn.rejectIfTcp = details;
      return FilterStatus.Continue;
    }
    conn.reject(L4_DENIED_STATUS, details);
    return FilterStatus.StopAndReply;
  }

  /** AuthorizationPolicies first, then (NetworkPolicy mode) the destination's NetworkPolicies. */
  private decideL4(conn: ConnectionContext, snapshot: MeshSnapshot, target: Target): string | undefined | Promise<string | undefined> {
    const rbac = this.decideTcp(conn, snapshot, target);
    if (!this.networkPolicy) return rbac;
    if (rbac === undefined) return decideTunnel(conn, snapshot, target);
    if (typeof rbac === 'string') return rbac;
    return rbac.then((d) => d ?? decideTunnel(conn, snapshot, target));
  }

  /**
   * The TCP decision for `conn` under `snapshot`: undefined when allowed, else the denial details
   * (a promise when an ext_authz provider must be asked).
   */
  private decideTcp(conn: ConnectionContext, snapshot: MeshSnapshot, target: Target): string | undefined | Promise<string | undefined> {
    const evaluator = authzFor(snapshot).forTarget(target).tcp;
    if (evaluator.empty) {
      conn.set(TCP_AUTHZ_RESULT, undefined);
      return undefined;
    }
    // The admission decision (under the snapshot the tunnel was admitted with) is counted and asks
    // the CUSTOM provider; re-checks on policy changes do neither (Envoy decides a connection once).
    const first = snapshot === conn.mesh;
    const attrs = connectionAttributes(conn);
    const result = evaluator.evaluate(attrs);
    conn.set(TCP_AUTHZ_RESULT, result);
    const rbac = () => {
      if (first) this.stats.tcp(result);
      return result.decision === 'DENY' ? rbacDeniedDetails(result) : undefined;
    };
    const custom = result.custom;
    if (custom && (first || !conn.get(TCP_CUSTOM_ALLOWED))) {
      const hook = this.extAuthz;
      if (!hook?.checkConnection) {
        this.warnNoHook(custom, 'TCP');
        return unavailableProviderDetails(custom);
      }
      // Envoy's network ext_authz (`filters/network/ext_authz`): asked once with the connection's
      // source and destination; a denial or a failed check (without `failOpen`) closes the
      // connection, refused here as the L4 denial (CONNECT 401). `statusOnError` has no TCP meaning.
      return hook.checkConnection(attrs, conn, custom).then(
        (d) => {
          if (d.allow) {
            this.countExtAuthz(d.failedOpen ? 'error' : 'ok');
            if (d.failedOpen) this.countExtAuthz('failure_mode_allowed');
            conn.set(TCP_CUSTOM_ALLOWED, true);
            return rbac();
          }
          this.countExtAuthz(d.details === 'ext_authz_error' ? 'error' : 'denied');
          conn.responseFlags = ResponseFlag.UnauthorizedExternalService;
          return d.details ?? 'ext_authz_denied';
        },
        (err: unknown) => {
          this.env.log.warn({ err: String(err), provider: custom.provider }, 'authz: ext_authz check of a TCP tunnel failed; denying');
          this.countExtAuthz('error');
          conn.responseFlags = ResponseFlag.UnauthorizedExternalService;
          return 'ext_authz_error';
        },
      );
    }
    return rbac();
  }

  /** Count a TCP ext_authz check (`chain` undefined) or an HTTP one. */
  private countExtAuthz(outcome: ExtAuthzStat, chain?: string): void {
    this.stats.extAuthz(outcome, chain);
  }

  private track(conn: ConnectionContext): void {
    this.tunnels.add(conn);
    if (!this.unsubscribe && this.env.mesh.subscribe) this.unsubscribe = this.env.mesh.subscribe((next) => this.recheck(next));
  }

  private untrack(conn: ConnectionContext): void {
    if (!this.tunnels.delete(conn) || this.tunnels.size > 0) return;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  /** A new mesh snapshot: re-decide every tracked tunnel; close the TCP ones now denied. */
  private recheck(next: MeshSnapshot): void {
    for (const conn of this.tunnels) {
      const inner = conn.innerProtocol;
      if (inner !== '' && inner !== 'TCP') {
        this.untrack(conn); // HTTP inside: each request is decided on its own
        continue;
      }
      if (conn.rejectStatus !== 0) continue; // already refused
      // A target no longer served here is not an authorization matter (the tunnel keeps its relay).
      const target = next.resolveTarget(conn.info.targetIp, conn.info.targetPort);
      if (!target) continue;
      let denied: string | undefined | Promise<string | undefined>;
      try {
        denied = this.decideL4(conn, next, target);
      } catch (err) {
        this.env.log.error({ err }, 'authz: re-check of an open tunnel failed');
        continue;
      }
      if (denied instanceof Promise) {
        denied.then((d) => this.apply(conn, d)).catch((err: unknown) => this.env.log.error({ err }, 'authz: re-check of an open tunnel failed'));
      } else this.apply(conn, denied);
    }
  }

  private apply(conn: ConnectionContext, denied: string | undefined): void {
    if (!this.tunnels.has(conn)) return; // closed meanwhile
    if (conn.protocol === 'UNKNOWN' && conn.innerProtocol === '') {
      conn.rejectIfTcp = denied ?? ''; // still sniffing: applies if it turns out to be TCP
      return;
    }
    if (denied === undefined) return;
    this.env.log.info(
      { peer: conn.info.peer.uri, target: conn.info.authority, details: denied },
      'authz: closing an open TCP tunnel that the changed policies deny',
    );
    this.untrack(conn);
    conn.terminate(denied);
  }

  // --- HTTP -----------------------------------------------------------------------------------

  onRequestHeaders(stream: StreamContext): PhaseResult {
    // A method that is not upper case and a target that is not origin-form never get here: the
    // connection manager refused the one and rewrote the other, as Envoy's does.
    const conn = stream.conn;
    const mesh = this.env.mesh.current;
    const authz = authzFor(mesh);
    // The connection manager normalized `:path` per MeshConfig `pathNormalization` before any
    // filter ran (Envoy's HCM `normalize_path`): match it as is, never decoding it a second time.
    const path = matchPath(stream.path);

    // A tunnel outlives snapshots: decide with today's policies for today's view of its target
    // (policies attached to a Service are keyed by that snapshot's Service).
    const resolved = mesh === conn.mesh ? conn.target : mesh.resolveTarget(conn.info.targetIp, conn.info.targetPort);
    if (!resolved) return FilterStatus.Continue; // no longer served: the router answers 404 NR
    if (this.networkPolicy) stream.set(STREAM_ADMISSION, requestAdmission(conn, mesh));
    const evaluator = authz.forTarget(resolved).http;
    const verifier = this.authn?.forTarget(mesh, resolved);
    if (evaluator.empty && !verifier) return FilterStatus.Continue;

    const info = conn.info;
    const headers = stream.requestHeaders;
    const attrs: RequestAttributes = {
      principal: info.peer.uri || undefined,
      sourceIp: info.downstreamAddress,
      remoteIp: remoteAddress(headers.joined('x-forwarded-for'), info.downstreamAddress),
      destinationIp: info.targetIp,
      destinationPort: info.targetPort,
      host: stream.authority || undefined,
      method: stream.method,
      path,
      // Over the live list: later evaluations see ext_authz and JWT header changes.
      headers: headersFromRaw(headers.raw),
      jwt: verifier ? undefined : stream.get(REQUEST_JWT),
    };
    // CUSTOM rules cannot use request.auth.* or requestPrincipals (Istio rejects them), so the
    // pre-JWT evaluation decides whether the provider is asked.
    const result = evaluator.empty ? undefined : evaluator.evaluate(attrs);
    if (result) stream.set(AUTHZ_RESULT, result);
    if (result?.custom) {
      const custom = result.custom;
      return this.custom(stream, attrs, custom).then((allowed) => (allowed ? this.afterCustom(stream, attrs, evaluator, result, verifier) : FilterStatus.StopAndReply));
    }
    return this.afterCustom(stream, attrs, evaluator, result, verifier);
  }

  /** JWT authentication (when a RequestAuthentication applies), then AUDIT/DENY/ALLOW with its attributes. */
  private afterCustom(
    stream: StreamContext,
    attrs: RequestAttributes,
    evaluator: { readonly empty: boolean; evaluate(a: RequestAttributes): AuthzResult },
    result: AuthzResult | undefined,
    verifier: RequestAuthenticator | undefined,
  ): PhaseResult {
    if (!verifier) return result ? this.enforce(stream, result) : FilterStatus.Continue;
    const proto = stream.requestHeaders.get('x-forwarded-proto');
    return verifier
      .authenticate({
        method: stream.method,
        path: stream.forwardPath ?? stream.path,
        host: stream.authority,
        headers: attrs.headers!,
        ...(proto ? { scheme: proto } : {}),
      })
      .then(
        (r) => {
          if (!r.ok) {
            stream.set(LOCAL_REPLY_HEADERS, r.headers);
            localReply(stream, r.status, r.body, ResponseFlag.None, r.details);
            return FilterStatus.StopAndReply;
          }
          const changes: [string, string | undefined][] = [];
          for (const n of r.headers.remove) changes.push([n, undefined]);
          for (const [n, v] of r.headers.set) changes.push([n.toLowerCase(), v]);
          editRequestHeaders(stream.requestHeaders, changes);
          if (r.path !== undefined) stream.forwardPath = r.path;
          if (r.jwt) stream.set(REQUEST_JWT, r.jwt);
          if (evaluator.empty) return FilterStatus.Continue;
          const next = evaluator.evaluate({ ...attrs, jwt: r.jwt });
          // A CUSTOM provider already allowed this request: keep its mark on the result.
          const final = result?.custom && !next.custom ? { ...next, custom: result.custom } : next;
          stream.set(AUTHZ_RESULT, final);
          return this.enforce(stream, final);
        },
        (err: unknown) => {
          this.env.log.warn({ err: String(err) }, 'authz: JWT authentication failed unexpectedly; denying');
          localReply(stream, 401, 'Jwt verification fails', ResponseFlag.None, 'jwt_authn_access_denied{Jwt_verification_fails}');
          return FilterStatus.StopAndReply;
        },
      );
  }

  /** CUSTOM first: ask the ext_authz provider; resolves true when it allows (DENY/ALLOW decide next). */
  private custom(stream: StreamContext, attrs: RequestAttributes, custom: CustomCheck): Promise<boolean> {
    const hook = this.extAuthz;
    if (!hook) {
      this.warnNoHook(custom, 'HTTP');
      sendLocalReply(stream, 403, RBAC_DENIED_BODY, ResponseFlag.None, unavailableProviderDetails(custom));
      return Promise.resolve(false);
    }
    let pending: Promise<ExtAuthzDecision>;
    try {
      pending = hook.check(attrs, stream, custom);
    } catch (err) {
      pending = Promise.reject(err);
    }
    const chain = stream.statPrefix;
    return pending.then(
      (d) => {
        if (d.allow) {
          const changes: [string, string | undefined][] = [];
          for (const name in d.headers) changes.push([name.toLowerCase(), d.headers[name]]);
          for (const name of d.removeHeaders ?? []) changes.push([name.toLowerCase(), undefined]);
          editRequestHeaders(stream.requestHeaders, changes);
          if (d.responseHeaders?.length) stream.set(RESPONSE_HEADER_EDITS, d.responseHeaders);
          this.countExtAuthz(d.failedOpen ? 'error' : 'ok', chain);
          if (d.failedOpen) this.countExtAuthz('failure_mode_allowed', chain);
          return true;
        }
        if (d.details === 'ext_authz_error') this.countExtAuthz('error', chain);
        else if (d.details === undefined || d.details === 'ext_authz_denied') this.countExtAuthz('denied', chain);
        if (d.headers) stream.set(LOCAL_REPLY_HEADERS, Object.entries(d.headers));
        localReply(stream, d.status ?? 403, d.body ?? '', d.responseFlag ?? ResponseFlag.UnauthorizedExternalService, d.details ?? 'ext_authz_denied');
        return false;
      },
      (err: unknown) => {
        this.env.log.warn({ err: String(err), provider: custom.provider }, 'authz: ext_authz check failed; denying');
        this.countExtAuthz('error', chain);
        localReply(stream, 403, '', ResponseFlag.UnauthorizedExternalService, 'ext_authz_error');
        return false;
      },
    );
  }

  /**
   * Headers of this filter's local reply (ext_authz denial, JWT `www-authenticate`), and the
   * response headers an allowing ext_authz server asked for (on any response, as Envoy's
   * ext_authz `encodeHeaders`).
   */
  onResponseHeaders(stream: StreamContext, headers: HeaderList): void {
    const h = stream.get(LOCAL_REPLY_HEADERS);
    if (h) for (const [name, value] of h) headers.set(name.toLowerCase(), value);
    const edits = stream.get(RESPONSE_HEADER_EDITS);
    if (edits) applyResponseMutations(headers, edits);
  }

  /** Count the request's AuthorizationPolicy decision, then enforce it. */
  private enforce(stream: StreamContext, result: AuthzResult): FilterStatus {
    this.stats.http(stream.statPrefix, result);
    return enforceDecision(stream, result);
  }

  private warnNoHook(custom: CustomCheck, what: string): void {
    if (this.warnedNoHook) return;
    this.warnedNoHook = true;
    this.env.log.warn(
      { provider: custom.provider, policy: custom.policy },
      `authz: a CUSTOM policy matched ${what} traffic but no ext_authz client is configured; its requests are denied as for an unusable provider`,
    );
  }
}
