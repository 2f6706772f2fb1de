/**
 * The in-cluster mode end to end, in process: the real Waypoint started with `cluster` settings
 * (from the environment Istio's waypoint template gives the pod) against a fake istiod (CA with
 * an intermediate, delta WDS) and a fake Kubernetes API, with HBONE traffic from sources whose
 * certificates chain to istiod's root flowing through every step and no request failed:
 * not ready while the root, the token or istiod is missing (no crash) → first sync → ready;
 * certificate rotation under traffic (short TTL; the chain with its intermediate served
 * downstream and upstream); WDS pushes adding, updating and removing services and endpoints; a
 * NACKed bad resource beside good ones; istiod dropping the stream and going away (still ready,
 * still serving) and coming back; an AuthorizationPolicy through the Kubernetes watch denying
 * (403) and, deleted, no longer; the metrics; a shutdown that closes every stream and watch.
 * The steps share one waypoint and run in order. Addresses: 127.0.201.x (istiod, API server,
 * waypoint) and 127.0.202.x (pods, VIPs).
 */
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { clusterSettingsFromEnv, Waypoint } from '../../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../../src/config/bootstrap.ts';
import { loadKubeConfig } from '../../../src/kube/index.ts';
import { log } from '../../../src/util/log.ts';
import { connect, exchange, hboneSession } from '../../helpers/hbone-client.ts';
import { authorizationPolicy, toService } from '../../helpers/mesh.ts';
import { parsePrometheus, scrape } from '../../helpers/prometheus.ts';
import { eventually, within } from '../../helpers/servers.ts';
import { get, Load, NS, readiness, serviceName, startClusterRig, until, wdsPod, wdsWebService, type ClusterRig } from './rig.ts';

const NET = '127.0.201';
const WAYPOINT_IP = `${NET}.10`;
const READINESS = `${WAYPOINT_IP}:15021`;
const POD = { one: '127.0.202.11', two: '127.0.202.12' };
const VIP = { web: '127.0.202.100', api: '127.0.202.101', api2: '127.0.202.102', api3: '127.0.202.103' };

let rig: ClusterRig;
let wp: Waypoint | undefined;
let load: Load | undefined;
const logged: string[] = [];
/** Readiness answers other than 200 once the waypoint was ready. */
const notReadyAfterReady: string[] = [];
let polling = false;
let poller: Promise<void> | undefined;

beforeAll(async () => {
  rig = await startClusterRig(NET, [POD.one, POD.two]);
  for (const level of ['warn', 'error'] as const) {
    vi.spyOn(log, level).mockImplementation(((o: unknown, msg?: string) => void logged.push(`${typeof o === 'string' ? o : String(msg)} ${JSON.stringify(o)}`)) as typeof log.warn);
  }
});
afterAll(async () => {
  polling = false;
  await poller;
  await load?.stop();
  await wp?.shutdown();
  await rig?.close();
  vi.restoreAllMocks();
});

const target = () => ({ host: WAYPOINT_IP, port: wp!.addresses.hbone.port });
const session = () => hboneSession(WAYPOINT_IP, wp!.addresses.hbone.port, rig.client);
async function once(vip: string, path = '/'): Promise<{ status: number; pod?: string }> {
  const s = await session();
  try {
    return await get(s, vip, path);
  } catch (err) {
    return { status: -1, pod: (err as Error).message };
  } finally {
    s.close();
  }
}
const lastResponse = () => rig.istiod.streams.at(-1)?.acks.at(-1);

describe('waypoint run --cluster against a fake istiod and Kubernetes API', () => {
  test('not ready, and answering, while the root, the token or istiod is missing; ready after the first sync and certificate', async () => {
    rig.istiod.push({ resources: [wdsWebService('web', VIP.web), wdsPod('echo-1', POD.one, ['web'])] });
    const settings = clusterSettingsFromEnv({ tokenFile: rig.tokenFile, rootCert: rig.rootFile }, rig.env(WAYPOINT_IP));
    const starting = Waypoint.start({
      bootstrap: overrideBootstrap(defaultBootstrap(), {
        listeners: { hbone: `${WAYPOINT_IP}:15008`, admin: `${WAYPOINT_IP}:0`, readiness: READINESS },
        identity: { certTtl: '8s' },
        upstream: { idleTimeoutMs: 300 },
        drain: { delayMs: 0, timeoutMs: 1000 },
      }),
      cluster: {
        ...settings,
        kubeConfig: loadKubeConfig(rig.kubeconfig),
        retry: { istiod: { initialMs: 50, maxMs: 300 }, kube: { initialMs: 50, maxMs: 300 }, certificate: { retryMs: 50, maxRetryMs: 300 } },
        rootPollMs: 50,
      },
    });
    let started = false;
    let failed: unknown;
    starting.then(
      (w) => ((wp = w), (started = true)),
      (err: unknown) => (failed = err),
    );

    // No root file yet: readiness says so.
    const noRoot = await until(async () => {
      const r = await readiness(READINESS).catch(() => undefined);
      return r?.status === 503 && r.body.includes("istiod's root certificate") ? r : undefined;
    }, 'readiness naming the missing root');
    expect(noRoot.body).toContain(rig.rootFile);
    expect((await fetch(`http://${READINESS}/healthz/live`)).status).toBe(200);
    await eventually(() => (logged.some((l) => l.includes(`trust root file ${rig.rootFile}`)) ? true : undefined), 'the missing root logged');

    // Root there, no token: the WDS stream cannot authenticate; the log names the token file.
    rig.writeRoot();
    await eventually(() => (logged.some((l) => l.includes('WDS: istiod unreachable') && l.includes(`the token file ${rig.tokenFile} does not exist`)) ? true : undefined), 'the missing token logged', 10_000);
    expect((await readiness(READINESS)).body).toMatch(/waiting for the first workload discovery \(WDS\) sync from istiod at 127\.0\.201\.1:\d+/);

    // Token there, istiod away: still waiting, still answering, never a crash.
    await rig.istiod.stop();
    rig.writeToken();
    const refusedBefore = logged.filter((l) => l.includes('WDS: istiod unreachable')).length;
    await eventually(() => (logged.filter((l) => l.includes('WDS: istiod unreachable')).length >= refusedBefore + 2 ? true : undefined), 'retries while istiod is away', 10_000);
    expect((await readiness(READINESS)).status).toBe(503);
    expect(started).toBe(false);
    expect(failed).toBeUndefined();

    // istiod back: first sync, first list of every kind, certificate → ready.
    await rig.istiod.restart();
    await within(starting, 20_000, 'the waypoint ready once istiod is back');
    expect(started).toBe(true);
    expect(await readiness(READINESS)).toEqual({ status: 200, body: '' });
    expect((await fetch(`http://${WAYPOINT_IP}:${wp!.addresses.admin.port}/healthz/ready`)).status).toBe(200);
    expect(wp!.mesh.current.waypoint.identity).toBe(`spiffe://cluster.local/ns/${NS}/sa/waypoint`);
    expect(rig.istiod.caCalls.at(-1)).toMatchObject({ authorization: `Bearer ${rig.istiod.token}`, clusterId: 'Kubernetes' });
    expect(await once(VIP.web)).toEqual({ status: 200, pod: 'echo-1' });

    // From now on: readiness must stay 200, and a steady load must never fail.
    polling = true;
    poller = (async () => {
      while (polling) {
        const r = await readiness(READINESS).catch((err: Error) => ({ status: -1, body: err.message }));
        if (r.status !== 200) notReadyAfterReady.push(`${r.status} ${r.body}`);
        await new Promise((res) => setTimeout(res, 25));
      }
    })();
    load = new Load(target(), rig.client, VIP.web);
  }, 60_000);

  let tunnel: { session: ClientHttp2Session; stream: Awaited<ReturnType<typeof connect>>['stream'] };

  test('a tunnel opened now stays open through every push below', async () => {
    const s = await session();
    const { status, stream } = await connect(s, `${VIP.web}:80`);
    expect(status).toBe(200);
    expect((await exchange(stream, '/first')).status).toBe(200);
    tunnel = { session: s, stream };
  });

  test('certificate rotation under traffic: new handshakes get each new certificate, leaf + intermediate', async () => {
    const first = wp!.certificate.current;
    await eventually(() => (load!.serverSerials.size >= 3 ? true : undefined), 'two rotations seen by new HBONE handshakes', 20_000);
    expect(wp!.certificate.current.notAfter.getTime()).toBeGreaterThan(first.notAfter.getTime());
    // The leaf is the intermediate's: a source trusting the root alone verified it only with the intermediate sent.
    expect([...load!.serverIssuers]).toEqual([expect.stringContaining('CN=Intermediate CA')]);
    expect(wp!.certificate.current.certPem.match(/BEGIN CERTIFICATE/g)).toHaveLength(2);
    expect(load!.failures).toEqual([]);
  }, 30_000);

  test('a WDS push adds a service and an endpoint; the upstream handshake presents the renewed certificate chain', async () => {
    rig.istiod.push({ resources: [wdsWebService('api', VIP.api), wdsPod('echo-2', POD.two, ['api'])] });
    await eventually(() => (wp!.mesh.current.resolveTarget(VIP.api, 80) ? true : undefined), 'the api service in the snapshot');
    expect(await once(VIP.api)).toEqual({ status: 200, pod: 'echo-2' });
    const [one, two] = rig.pods;
    // echo-1 was first reached with the first certificate, echo-2 only after rotations; each pod
    // trusts the root alone, so the waypoint sent its intermediate upstream too.
    expect(one.clientSerials.length).toBeGreaterThan(0);
    expect(two.clientSerials.length).toBeGreaterThan(0);
    expect(two.clientSerials[0]).not.toBe(one.clientSerials[0]);
    expect(lastResponse()?.errorDetail).toBeUndefined();
  });

  test('an update: echo-2 becomes an endpoint of web too', async () => {
    const before = load!.served('echo-2');
    rig.istiod.push({ resources: [wdsPod('echo-2', POD.two, ['api', 'web'])] });
    await eventually(() => (load!.served('echo-2') > before + 5 ? true : undefined), 'web answered by echo-2 as well', 10_000);
    expect(load!.served('echo-1')).toBeGreaterThan(0);
  });

  test('a removal: the api service and then the echo-2 workload go', async () => {
    rig.istiod.push({ removed: [serviceName('api')] });
    await eventually(() => (wp!.mesh.current.resolveTarget(VIP.api, 80) === undefined ? true : undefined), 'api gone from the snapshot');
    expect((await once(VIP.api)).status).not.toBe(200);
    rig.istiod.push({ removed: [`Kubernetes//Pod/${NS}/echo-2`] });
    await eventually(() => (wp!.mesh.current.workloads.some((w) => w.name === 'echo-2') ? undefined : true), 'echo-2 gone from the snapshot');
    const after = load!.served('echo-2');
    const oneBefore = load!.served('echo-1');
    await eventually(() => (load!.served('echo-1') > oneBefore + 10 ? true : undefined), 'more requests answered', 10_000);
    expect(load!.served('echo-2')).toBeLessThanOrEqual(after + 2); // at most the ones in flight at the push
  });

  test('a NACKed bad resource beside good ones: the good ones apply', async () => {
    const nonce = rig.istiod.push({ resources: [{ name: 'demo/broken', raw: { value: new Uint8Array([0xff, 0xff, 0xff]) } }, wdsWebService('api2', VIP.api2), wdsPod('echo-2', POD.two, ['api2'])] });
    await rig.istiod.waitFor(() => lastResponse()?.responseNonce === nonce, 10_000, 'the answer to the push');
    expect(lastResponse()?.errorDetail?.message).toContain('demo/broken');
    await eventually(() => (wp!.mesh.current.resolveTarget(VIP.api2, 80) ? true : undefined), 'api2 in the snapshot');
    expect(await once(VIP.api2)).toEqual({ status: 200, pod: 'echo-2' });
    // istiod would send it again on every new stream (the waypoint does not hold it): fixed at the source.
    rig.istiod.push({ removed: ['demo/broken'] });
  });

  test('istiod drops the stream, then goes away: still ready and serving; back, it resumes from the versions held', async () => {
    const streams = rig.istiod.streams.length;
    rig.istiod.dropStreams();
    await rig.istiod.waitFor(() => rig.istiod.streams.length > streams && rig.istiod.streams.at(-1)!.acks.length > 0, 10_000, 'the reconnected stream');
    const resumed = rig.istiod.streams.at(-1)!.initial!;
    expect(Object.keys(resumed.initialResourceVersions)).toEqual(expect.arrayContaining([serviceName('web'), serviceName('api2'), `Kubernetes//Pod/${NS}/echo-1`]));

    await rig.istiod.stop();
    const okBefore = load!.ok;
    await eventually(() => (load!.ok > okBefore + 20 ? true : undefined), 'requests served while istiod is away', 10_000);
    expect((await readiness(READINESS)).status).toBe(200);
    // Pushed while away: reaches the waypoint when the stream is back.
    rig.istiod.push({ resources: [wdsWebService('api3', VIP.api3), wdsPod('echo-1', POD.one, ['web', 'api3'])] });
    await rig.istiod.restart();
    await eventually(() => (wp!.mesh.current.resolveTarget(VIP.api3, 80) ? true : undefined), 'api3 after the reconnect', 10_000);
    expect(await once(VIP.api3)).toEqual({ status: 200, pod: 'echo-1' });
  }, 30_000);

  test('an AuthorizationPolicy added through the Kubernetes watch denies (403); deleted, it no longer does', async () => {
    const policy = rig.kube.apply(
      authorizationPolicy('deny-admin', { targetRefs: toService('web'), action: 'DENY', rules: [{ to: [{ operation: { paths: ['/admin'] } }] }] }, { namespace: NS }),
    );
    await until(async () => ((await once(VIP.web, '/admin')).status === 403 ? true : undefined), 'the policy denying', 10_000);
    expect((await once(VIP.web, '/')).status).toBe(200);
    rig.kube.remove(policy);
    await until(async () => ((await once(VIP.web, '/admin')).status === 200 ? true : undefined), 'the policy gone', 10_000);
  }, 30_000);

  test('no request failed, readiness never dropped, the tunnel opened before the pushes still works', async () => {
    const r = await exchange(tunnel.stream, '/last');
    expect(r.status).toBe(200);
    tunnel.stream.end();
    tunnel.session.close();
    polling = false;
    await poller;
    await load!.stop();
    expect(load!.failures).toEqual([]);
    expect(load!.ok).toBeGreaterThan(100);
    expect(notReadyAfterReady).toEqual([]);
  }, 20_000);

  test('metrics: certificate expiry and renewal failures, the WDS stream', async () => {
    const samples = parsePrometheus(await scrape(wp!.addresses.admin));
    const value = (name: string, labels: Record<string, string> = {}) =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
    expect(value('waypoint_certificate_expiry_seconds')).toBeGreaterThan(0);
    expect(value('waypoint_certificate_expiry_timestamp_seconds')).toBe(Math.floor(wp!.certificate.current.notAfter.getTime() / 1000));
    expect(value('waypoint_certificate_renewal_failures_total')).toBe(wp!.certificate.failures);
    expect(value('waypoint_wds_connected')).toBe(1);
    expect(value('waypoint_wds_synced')).toBe(1);
    expect(value('waypoint_wds_responses_total', { result: 'nack' })).toBe(1);
    expect(value('waypoint_wds_responses_total', { result: 'ack' })).toBeGreaterThan(5);
    expect(value('waypoint_wds_connects_total')).toBeGreaterThanOrEqual(3);
  });

  test('shutdown closes the WDS stream, the watches and the certificate renewal', async () => {
    const caCalls = rig.istiod.caCalls.length;
    await within(wp!.shutdown(), 10_000, 'shutdown');
    await eventually(() => (rig.kube.openWatches() === 0 ? true : undefined), 'every watch closed');
    await rig.istiod.waitFor(() => rig.istiod.streams.every((s) => s.ended), 10_000, 'every WDS stream ended');
    expect((await readiness(READINESS).catch(() => ({ status: -1 }))).status).toBe(-1);
    await new Promise((r) => setTimeout(r, 5000)); // more than the renewal interval (half of 8 s)
    expect(rig.istiod.caCalls.length).toBe(caCalls);
    wp = undefined;
  }, 30_000);
});
