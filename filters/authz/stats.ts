/**
 * Authorization counters of `istio.authz` in `/stats/prometheus`, named as Envoy's Prometheus
 * exporter prints the stats of the filters Istio's waypoint runs (tag extraction per
 * envoyproxy/envoy source/common/config/well_known_names.cc; stats per the RBAC and ext_authz
 * filter docs):
 *
 * HTTP chain (`http.<hcm prefix>.rbac.*`, `http.<hcm prefix>.ext_authz.*`; label
 * `envoy_http_conn_manager_prefix` = the inbound chain's cluster name, e.g.
 * `inbound-vip|80|http|web.foo.svc.cluster.local`, Istio's per-service HTTP chain):
 * - `envoy_http_rbac_allowed`, `envoy_http_rbac_denied`: one per request a policy applied to, by
 *   the enforced AuthorizationPolicy decision (CUSTOM's provider answer is counted apart);
 * - dry-run policies (Istio's `shadow_rules_stat_prefix` `istio_dry_run_allow_` /
 *   `istio_dry_run_deny_`, no tag extracted since the prefix has no dot):
 *   `envoy_http_rbac_istio_dry_run_allow_shadow_allowed` / `..._shadow_denied`,
 *   `envoy_http_rbac_istio_dry_run_deny_shadow_allowed` / `..._shadow_denied`;
 * - ext_authz (CUSTOM): `envoy_http_ext_authz_ok`, `_denied`, `_error`, `_failure_mode_allowed`
 *   (an error under `failOpen` counts in both `error` and `failure_mode_allowed`, as Envoy's).
 *
 * TCP chain (network RBAC with Istio's `stat_prefix: tcp.` → `tcp.rbac.*`, tag `envoy_rbac_prefix`
 * from the `$.rbac.**` extractor): `envoy_rbac_allowed{envoy_rbac_prefix="tcp"}`,
 * `envoy_rbac_denied{...}`, the dry-run counters `envoy_rbac_istio_dry_run_*_shadow_*{...}`. The
 * network ext_authz has the same `stat_prefix: tcp.` (istio/istio pilot/pkg/security/authz/builder/
 * extauthz.go) and names its stats `ext_authz.<stat_prefix>.<stat>` (envoyproxy/envoy
 * source/extensions/filters/network/ext_authz/ext_authz.cc `generateStats`), so
 * `ext_authz.tcp..ok`: no tag extractor matches it (EXT_AUTHZ_PREFIX is for `http.*.ext_authz.*`
 * and `cluster.*.ext_authz.*` only, RBAC_PREFIX for `*.rbac.*`), and the Prometheus exporter turns
 * each `.` into `_`: `envoy_ext_authz_tcp__ok`, `__denied`, `__error`, `__failure_mode_allowed`,
 * without labels.
 *
 * The matching policy is not a label: Envoy names a policy in stats only with `rules_stat_prefix`
 * per-policy stats, which Istio does not configure; it is in the access log
 * (`rbac_access_denied_matched_policy[...]`) and dynamic metadata only.
 */
import { Counter, type Registry } from 'prom-client';
import type { AuthzResult } from '../../src/authz/index.ts';

/** What one ext_authz check ended with, as Envoy's ext_authz counters see it. */
export type ExtAuthzStat = 'ok' | 'denied' | 'error' | 'failure_mode_allowed';
const EXT_AUTHZ_STATS: readonly ExtAuthzStat[] = ['ok', 'denied', 'error', 'failure_mode_allowed'];

const HCM = 'envoy_http_conn_manager_prefix';
const RBAC_PREFIX = 'envoy_rbac_prefix';
const TCP_PREFIX = 'tcp';

const SHADOW = [
  'istio_dry_run_allow_shadow_allowed',
  'istio_dry_run_allow_shadow_denied',
  'istio_dry_run_deny_shadow_allowed',
  'istio_dry_run_deny_shadow_denied',
] as const;
type ShadowStat = (typeof SHADOW)[number];

/**
 * Which dry-run counter a result's shadow part hits. The evaluator's shadow result says it: a
 * matched dry-run DENY rule (DENY with a policy), no dry-run DENY rule matched and no dry-run ALLOW
 * policy (ALLOW without one), a matched dry-run ALLOW rule (ALLOW with one), none matched (DENY
 * without one).
 */
export function shadowStat(result: AuthzResult): ShadowStat | undefined {
  const s = result.shadow;
  if (!s) return undefined;
  if (s.decision === 'DENY') return s.policy !== undefined ? 'istio_dry_run_deny_shadow_denied' : 'istio_dry_run_allow_shadow_denied';
  return s.policy !== undefined ? 'istio_dry_run_allow_shadow_allowed' : 'istio_dry_run_deny_shadow_allowed';
}

type Child = { inc(): void };

/** One counter family with its children cached by label value (one Map lookup per count). */
class Family {
  private readonly counter: Counter<string>;
  private readonly children = new Map<string, Child>();
  constructor(registry: Registry, name: string, help: string, label: string) {
    const existing = registry.getSingleMetric(name);
    this.counter = (existing as Counter<string> | undefined) ?? new Counter({ name, help, labelNames: [label], registers: [registry] });
  }
  inc(value: string): void {
    let c = this.children.get(value);
    if (c === undefined) {
      c = this.counter.labels(value);
      this.children.set(value, c);
    }
    c.inc();
  }
}

/** The authorization counters of one registry. */
export class AuthzStats {
  private readonly httpRbac: Record<'allowed' | 'denied' | ShadowStat, Family>;
  private readonly tcpRbac: Record<'allowed' | 'denied' | ShadowStat, Family>;
  private readonly httpExtAuthz: Record<ExtAuthzStat, Family>;
  private readonly tcpExtAuthz: Record<ExtAuthzStat, Counter>;

  constructor(registry: Registry) {
    const rbac = (base: string, label: string, what: string) => {
      const out = {} as Record<'allowed' | 'denied' | ShadowStat, Family>;
      for (const k of ['allowed', 'denied', ...SHADOW] as const) out[k] = new Family(registry, `${base}_${k}`, `${what} RBAC: ${k.replace(/_/g, ' ')}.`, label);
      return out;
    };
    const ext = (base: string, label: string, what: string) => {
      const out = {} as Record<ExtAuthzStat, Family>;
      for (const k of EXT_AUTHZ_STATS) out[k] = new Family(registry, `${base}${k}`, `${what} ext_authz checks: ${k.replace(/_/g, ' ')}.`, label);
      return out;
    };
    this.httpRbac = rbac('envoy_http_rbac', HCM, 'HTTP');
    this.tcpRbac = rbac('envoy_rbac', RBAC_PREFIX, 'TCP');
    this.httpExtAuthz = ext('envoy_http_ext_authz_', HCM, 'HTTP');
    this.tcpExtAuthz = {} as Record<ExtAuthzStat, Counter>;
    for (const k of EXT_AUTHZ_STATS) {
      const name = `envoy_ext_authz_tcp__${k}`;
      this.tcpExtAuthz[k] = (registry.getSingleMetric(name) as Counter | undefined) ?? new Counter({ name, help: `TCP ext_authz checks: ${k.replace(/_/g, ' ')}.`, registers: [registry] });
    }
  }

  /** Count an HTTP request's enforced decision and its dry-run result; `chain` is the HCM prefix label. */
  http(chain: string, result: AuthzResult): void {
    this.httpRbac[result.decision === 'DENY' ? 'denied' : 'allowed'].inc(chain);
    const s = shadowStat(result);
    if (s) this.httpRbac[s].inc(chain);
  }

  /** Count a TCP connection's decision and its dry-run result. */
  tcp(result: AuthzResult): void {
    this.tcpRbac[result.decision === 'DENY' ? 'denied' : 'allowed'].inc(TCP_PREFIX);
    const s = shadowStat(result);
    if (s) this.tcpRbac[s].inc(TCP_PREFIX);
  }

  /** Count one ext_authz check (HTTP: `chain` is the HCM prefix label; TCP: omit it). */
  extAuthz(outcome: ExtAuthzStat, chain?: string): void {
    if (chain === undefined) this.tcpExtAuthz[outcome].inc();
    else this.httpExtAuthz[outcome].inc(chain);
  }
}

const byRegistry = new WeakMap<Registry, AuthzStats>();

/** The registry's authorization counters, created on first use (a rebuilt chain keeps counting into them). */
export function authzStatsFor(registry: Registry): AuthzStats {
  let s = byRegistry.get(registry);
  if (!s) byRegistry.set(registry, (s = new AuthzStats(registry)));
  return s;
}
