/**
 * Invalid AuthorizationPolicy / RequestAuthentication errors name the mesh file and line, as the
 * state loader's schema errors do: `waypoint run` prints `waypoint: FILE:LINE: document N:
 * <Kind>/<ns>/<name>: field <path>: <message>` and exits 1; a reload keeps the last good
 * snapshot and logs the same text. Addresses: 127.0.124.x.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { log } from '../../../src/util/log.ts';
import { AuthzWaypoint, meshYaml } from './harness.ts';

log.level = 'silent';

const NET = '127.0.124';
const BIN = path.resolve(import.meta.dirname, '../../../bin/waypoint.js');
const GOOD = meshYaml({ apps: [{ name: 'web', vip: `${NET}.100`, podIp: `${NET}.11`, ports: [{ name: 'http', port: 80, targetPort: 8080 }] }] });

/** A policy document whose `ipBlocks[1]` is not an address (an error of the rule compiler). */
const BAD_IP_BLOCK = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: bad-ip, namespace: foo }
spec:
  targetRefs: [{ kind: Service, group: "", name: web }]
  rules:
  - from:
    - source:
        ipBlocks:
        - 10.0.0.0/8
        - not-an-ip
`;
/** A DENY policy without rules (an error of the policy parser). */
const DENY_NO_RULES = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-nothing, namespace: foo }
spec:
  targetRefs: [{ kind: Service, group: "", name: web }]
  action: DENY
`;
const BAD_JWKS = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: bad-jwks, namespace: foo }
spec:
  targetRefs: [{ kind: Service, group: "", name: web }]
  jwtRules:
  - issuer: https://issuer.test
    jwks: '{not json'
`;

/** 1-based line of the first line of `needle` in `text`. */
const lineOfText = (text: string, needle: string) => text.slice(0, text.indexOf(needle)).split('\n').length;

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-authz-cfg-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function run(mesh: string, name: string) {
  const file = path.join(dir, `${name}.yaml`);
  fs.writeFileSync(file, mesh);
  const r = spawnSync(process.execPath, [BIN, 'run', '--mesh', file, '--hbone', `${NET}.1:0`, '--admin', `${NET}.1:0`, '--readiness', ''], {
    encoding: 'utf8',
    timeout: 20_000,
    env: { ...process.env, WAYPOINT_STATE_DIR: path.join(dir, 'state'), WAYPOINT_LOG_LEVEL: 'error' },
  });
  return { file, status: r.status, last: r.stderr.trim().split('\n').pop() ?? '' };
}

describe('waypoint run refuses to start, naming file and line', () => {
  test('a rule the compiler rejects (ipBlocks entry)', () => {
    const mesh = `${GOOD}---\n${BAD_IP_BLOCK}`;
    const r = run(mesh, 'bad-ip');
    expect(r.status).toBe(1);
    const line = lineOfText(mesh, '        - not-an-ip');
    expect(r.last).toContain(`waypoint: ${r.file}:${line}: document 4: AuthorizationPolicy/foo/bad-ip: field spec.rules[0].from[0].source.ipBlocks[1]: `);
  });

  test('a policy the parser rejects (DENY without rules)', () => {
    const mesh = `${GOOD}---\n${DENY_NO_RULES}`;
    const r = run(mesh, 'deny-nothing');
    expect(r.status).toBe(1);
    expect(r.last).toMatch(new RegExp(`^waypoint: ${r.file.replaceAll('.', '\\.')}:\\d+: document 4: AuthorizationPolicy/foo/deny-nothing: field spec\\.rules: DENY action without`));
  });

  test('an invalid RequestAuthentication', () => {
    const mesh = `${GOOD}---\n${BAD_JWKS}`;
    const r = run(mesh, 'bad-jwks');
    expect(r.status).toBe(1);
    const line = lineOfText(mesh, "    jwks: '{not json'");
    expect(r.last).toContain(`waypoint: ${r.file}:${line}: document 4: RequestAuthentication/foo/bad-jwks: field spec.jwtRules[0].jwks: `);
  });
});

test('a reload with an invalid policy keeps the last snapshot and logs the same located text', async () => {
  const wp = await AuthzWaypoint.start({ ip: `${NET}.2`, mesh: GOOD });
  const errors: string[] = [];
  const spy = vi.spyOn(log, 'error').mockImplementation(((_obj: unknown, msg?: string) => {
    if (typeof msg === 'string') errors.push(msg);
  }) as never);
  try {
    const mesh = `${GOOD}---\n${BAD_IP_BLOCK}`;
    expect(await wp.setMesh(mesh)).toBe(false);
    const line = lineOfText(mesh, '        - not-an-ip');
    expect(errors.some((m) => m.includes(`invalid authorization policy: ${wp.meshFile}:${line}: document 4: AuthorizationPolicy/foo/bad-ip: field spec.rules[0].from[0].source.ipBlocks[1]: `))).toBe(true);
  } finally {
    spy.mockRestore();
    await wp.close();
  }
});
