/**
 * In-cluster mode when istiod answers but refuses: a token istiod does not accept, and a root file
 * that is not istiod's root. The readiness endpoint's 503 names the last WDS error, and it and the
 * log word the cause (credentials refused: UNAUTHENTICATED; TLS failure) instead of calling a
 * reachable istiod unreachable. Addresses: 127.0.226.x.
 */
import fs from 'node:fs';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { clusterSettingsFromEnv, Waypoint } from '../../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../../src/config/bootstrap.ts';
import { loadKubeConfig } from '../../../src/kube/index.ts';
import { log } from '../../../src/util/log.ts';
import { IstiodPki } from '../../helpers/istiod-pki.ts';
import { readiness, startClusterRig, until, type ClusterRig } from './rig.ts';

const NET = '127.0.226';
const WAYPOINT_IP = `${NET}.10`;
const READINESS = `${WAYPOINT_IP}:15021`;
let rig: ClusterRig;
let other: IstiodPki;
const logged: string[] = [];

beforeAll(async () => {
  rig = await startClusterRig(NET, []);
  other = await IstiodPki.create();
  vi.spyOn(log, 'warn').mockImplementation(((o: unknown, msg?: string) => void logged.push(String(msg))) as typeof log.warn);
});
afterAll(async () => {
  vi.restoreAllMocks();
  other?.close();
  await rig?.close();
});

/** A waypoint starting against the rig (aborted by the test: it never gets ready). */
function start(signal: AbortSignal): Promise<Waypoint> {
  const starting = Waypoint.start({
    bootstrap: overrideBootstrap(defaultBootstrap(), {
      listeners: { hbone: `${WAYPOINT_IP}:15008`, admin: `${WAYPOINT_IP}:0`, readiness: READINESS },
      drain: { delayMs: 0, timeoutMs: 500 },
    }),
    cluster: {
      ...clusterSettingsFromEnv({ tokenFile: rig.tokenFile, rootCert: rig.rootFile }, rig.env(WAYPOINT_IP)),
      kubeConfig: loadKubeConfig(rig.kubeconfig),
      retry: { istiod: { initialMs: 50, maxMs: 200 }, kube: { initialMs: 50, maxMs: 200 }, certificate: { retryMs: 50, maxRetryMs: 200 } },
      rootPollMs: 50,
    },
    signal,
  });
  starting.catch(() => {});
  return starting;
}

/** The readiness 503 once its body names a last error. */
function lastError(): Promise<{ status: number; body: string }> {
  return until(async () => {
    const r = await readiness(READINESS).catch(() => undefined);
    return r?.status === 503 && r.body.includes('last error') ? r : undefined;
  }, 'readiness naming the last error');
}

test('a token istiod refuses: UNAUTHENTICATED named in the readiness 503 and the log, not "unreachable"', async () => {
  rig.writeRoot();
  rig.writeToken();
  fs.writeFileSync(rig.tokenFile, 'not-the-token\n');
  logged.length = 0;
  const ac = new AbortController();
  const starting = start(ac.signal);
  const r = await lastError();
  expect(r.body).toMatch(/first workload discovery \(WDS\) sync from istiod at 127\.0\.226\.1:\d+ \(last error: istiod refused the pod's credentials: UNAUTHENTICATED: authentication failure \(is the token file/);
  expect(logged.some((l) => l.startsWith("WDS: istiod refused the pod's credentials: UNAUTHENTICATED"))).toBe(true);
  expect(logged.filter((l) => l.includes('istiod unreachable'))).toEqual([]);
  ac.abort(new Error('test over'));
  await expect(starting).rejects.toThrow(/test over/);
});

test("a root file that is not istiod's root: the TLS failure named in the readiness 503 and the log", async () => {
  rig.writeToken();
  fs.writeFileSync(rig.rootFile, other.rootCertPem);
  logged.length = 0;
  const ac = new AbortController();
  const starting = start(ac.signal);
  const r = await lastError();
  expect(r.body).toMatch(/\(last error: TLS with istiod failed: UNAVAILABLE: .*certificate.*\(does the root certificate file hold istiod's root\?\)/);
  expect(logged.some((l) => l.startsWith('WDS: TLS with istiod failed'))).toBe(true);
  expect(logged.filter((l) => l.includes('istiod unreachable'))).toEqual([]);
  ac.abort(new Error('test over'));
  await expect(starting).rejects.toThrow(/test over/);
});
