/**
 * Decision-level conformance against test/data/authz-cases-sample.yaml. For every case, the fixtures plus the case's policies
 * become one mesh file (every fixture address remapped 10.x → 127.x), compiled by the real mesh
 * compiler; each check whose enforcer is the waypoint is evaluated with the engine for the target
 * the waypoint would resolve, and its decision (plus audit flag, shadow result and forwarded path
 * where the case states them) is asserted. The expected status is in the test name; statuses are
 * asserted end to end by the authz filter's integration tests.
 *
 * Out of scope here, listed as skipped with the reason: ztunnel checks (the `inbound` role's L4
 * enforcement), CNI (NetworkPolicy) checks, ingress-gateway checks, and the waypoint listener's
 * TLS handshake.
 */
import { describe, expect, test } from 'vitest';

import { compileAuthz, type CompiledAuthz } from '../../../src/authz/compile.ts';
import { headersFromRaw } from '../../../src/authz/index.ts';
import type { AuthzResult, RequestAttributes } from '../../../src/authz/types.ts';
import {
  caseMesh,
  cases,
  checkAuthority,
  checkSource,
  checkTarget,
  expectedName,
  jwtOf,
  outOfScope,
  remapTo127 as remap,
  type Case,
  type Check,
} from '../../helpers/authz-cases.ts';

/** Request headers from a record (a list = several fields of one name), as the engine reads them. */
const headersOf = (h: Readonly<Record<string, string | readonly string[]>>) => headersFromRaw(Object.entries(h).flatMap(([n, v]) => (typeof v === 'string' ? [n, v] : v.flatMap((x) => [n, x]))));

// --- Checks as request attributes -------------------------------------------------------------

interface Prepared {
  readonly attrs: RequestAttributes;
  readonly target: { ip: string; port: number };
  readonly forward?: string;
  readonly rejected?: boolean;
}

function prepare(c: Case, check: Check, authz: CompiledAuthz): Prepared {
  const r = check.request;
  const target = remap(checkTarget(r));
  const { principal, ip } = checkSource(r);
  const base: RequestAttributes = {
    ...(principal !== undefined ? { principal } : {}),
    sourceIp: remap(ip),
    destinationIp: target.ip,
    destinationPort: target.port,
  };
  if (r.protocol === 'tcp') return { attrs: base, target };
  const normalized = authz.normalizePath(r.path ?? '/');
  if (!normalized) return { attrs: base, target, rejected: true };
  const jwt = jwtOf(c, r);
  return {
    attrs: {
      ...base,
      host: checkAuthority(r, target),
      method: r.method ?? 'GET',
      path: normalized.path,
      headers: headersOf(r.headers ?? {}),
      ...(jwt ? { jwt } : {}),
    },
    target,
    forward: normalized.forward,
  };
}

// --- The tests --------------------------------------------------------------------------------

for (const c of cases) {
  describe(`${c.id} ${c.title} [${c.enforcer}]`, () => {
    const inScope = c.checks.some((check) => outOfScope(c, check) === undefined);
    const snap = inScope ? caseMesh(c) : undefined;
    const authz = snap ? compileAuthz(snap) : undefined;

    for (const check of c.checks) {
      const reason = outOfScope(c, check);
      if (reason) {
        test.skip(`${check.id} ${expectedName(check)}: out of scope, ${reason}`, () => {});
        continue;
      }
      test(`${check.id} → ${expectedName(check)}: ${check.why ?? ''}`, () => {
        const p = prepare(c, check, authz!);
        expect(p.rejected ?? false, 'the path was rejected before authz').toBe(false);
        const target = snap!.resolveTarget(p.target.ip, p.target.port);
        expect(target, `the waypoint serves ${p.target.ip}:${p.target.port}`).toBeDefined();
        const evaluators = authz!.forTarget(target!);
        const result: AuthzResult = (check.request.protocol === 'tcp' ? evaluators.tcp : evaluators.http).evaluate(p.attrs);

        const expected = (check.expect.waypoint_decision ?? check.expect.decision).toUpperCase();
        expect(result.decision, JSON.stringify(result)).toBe(expected);
        if (check.expect.audit !== undefined) expect(result.audit !== undefined).toBe(check.expect.audit);
        if (check.expect.shadow_result !== undefined) {
          expect(result.shadow?.decision).toBe(check.expect.shadow_result === 'denied' ? 'DENY' : 'ALLOW');
        }
        if (check.expect.forwarded_path !== undefined) expect(p.forward).toBe(check.expect.forwarded_path);
      });
      if (check.expect.destination_ztunnel_decision !== undefined) {
        test.skip(`${check.id} destination ztunnel → ${check.expect.destination_ztunnel_decision}: out of scope, ztunnel (inbound role) part of the check`, () => {});
      }
    }
  });
}

describe('fixture mesh', () => {
  test('every fixture address is remapped to 127.x', () => {
    const snap = caseMesh(cases[0]);
    const addresses = [...snap.services.flatMap((s) => s.addresses), ...snap.workloads.flatMap((w) => w.addresses)];
    expect(addresses.length).toBeGreaterThan(0);
    for (const a of addresses) expect(a.startsWith('127.'), a).toBe(true);
  });
});
