/**
 * A cluster on loopback for the in-cluster mode's tests (`waypoint run --cluster`):
 * - a fake istiod (test/helpers/fake-istiod.ts): CA signing with an intermediate, delta WDS;
 * - a fake Kubernetes API (test/helpers/fake-kube.ts) holding the waypoint's Namespace and Gateway;
 * - "pods": HBONE servers on `<ip>:15008` with certificates from the fake istiod's CA (leaf and
 *   intermediate presented, the root trusted), each CONNECT answered by a small HTTP server
 *   naming the pod, every client certificate recorded (the waypoint's, upstream);
 * - HBONE clients (a source ztunnel) with certificates chaining to the same root, and a load of
 *   requests through the waypoint that counts every failure;
 * - the WDS resources of the mesh: Services pointing at the waypoint by hostname, HBONE workloads.
 * Every address is in the caller's range.
 */
import fs from 'node:fs';
import http from 'node:http';
import http2, { type ClientHttp2Session, type ServerHttp2Stream } from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import { createWorkloadCsr } from '../../../src/identity/index.ts';
import { wdsProto } from '../../../src/istiod/index.ts';
import { FakeIstiod, ipBytes, wdsService, wdsWorkload, type PushedResource } from '../../helpers/fake-istiod.ts';
import { FakeKube } from '../../helpers/fake-kube.ts';
import { connect, exchange, hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { IstiodPki } from '../../helpers/istiod-pki.ts';
import { namespace, waypointGateway } from '../../helpers/mesh.ts';
import { sleep } from '../../helpers/servers.ts';

export const NS = 'demo';
export const TOKEN = 'projected-istio-token';
const WAYPOINT_HOST = `waypoint.${NS}.svc.cluster.local`;
const { AppProtocolValue: AP, TunnelProtocolValue: TP } = wdsProto;

/** TLS material for `spiffe` signed by the fake istiod's intermediate: leaf + intermediate, the root trusted. */
export async function istiodIdentity(pki: IstiodPki, spiffe: string): Promise<ClientIdentity> {
  const csr = await createWorkloadCsr(spiffe);
  const [leaf, intermediate, root] = await pki.sign(csr.csrPem, 3600);
  return { certPem: leaf + intermediate, keyPem: csr.keyPem, caPem: root };
}

/** A WDS Service `demo/<name>` at `vip`, port 80 → 8080 (HTTP/1.1), served by this waypoint. */
export function wdsWebService(name: string, vip: string): PushedResource {
  return wdsService({
    name,
    namespace: NS,
    hostname: `${name}.${NS}.svc.cluster.local`,
    addresses: [{ address: ipBytes(vip) }],
    ports: [{ servicePort: 80, targetPort: 8080, appProtocol: AP.HTTP11 }],
    waypoint: { destination: { case: 'hostname', value: { namespace: NS, hostname: WAYPOINT_HOST } }, hboneMtlsPort: 15008 },
  });
}

/** A WDS Workload (an HBONE pod, service account `echo`) at `ip`, an endpoint of `services` on 80 → 8080. */
export function wdsPod(name: string, ip: string, services: readonly string[]): PushedResource {
  return wdsWorkload({
    uid: `Kubernetes//Pod/${NS}/${name}`,
    name,
    namespace: NS,
    addresses: [ipBytes(ip)],
    serviceAccount: 'echo',
    workloadName: 'echo',
    tunnelProtocol: TP.HBONE,
    services: Object.fromEntries(services.map((s) => [`${NS}/${s}.${NS}.svc.cluster.local`, { ports: [{ servicePort: 80, targetPort: 8080 }] }])),
  });
}

/** The WDS resource name of Service `demo/<name>`. */
export const serviceName = (name: string) => `${NS}/${name}.${NS}.svc.cluster.local`;

/** A pod: HBONE on `<ip>:15008`, recording the serial of every client certificate. */
export interface Pod {
  readonly name: string;
  readonly ip: string;
  /** Serial numbers of the client certificates of the TLS sessions accepted (verified against the root only). */
  readonly clientSerials: string[];
  close(): Promise<void>;
}

async function startPod(pki: IstiodPki, name: string, ip: string): Promise<Pod> {
  const id = await istiodIdentity(pki, `spiffe://cluster.local/ns/${NS}/sa/echo`);
  const app = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({ pod: name, path: req.url });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  // Only the root is trusted: a client presenting its leaf without the intermediate is refused.
  const server = http2.createSecureServer({ cert: id.certPem, key: id.keyPem, ca: id.caPem, requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.3' });
  const clientSerials: string[] = [];
  server.on('secureConnection', (tls: TLSSocket) => {
    const peer = tls.getPeerX509Certificate();
    if (peer) clientSerials.push(peer.serialNumber);
  });
  server.on('stream', (stream: ServerHttp2Stream, headers) => {
    if (headers[':method'] !== 'CONNECT') return stream.close(http2.constants.NGHTTP2_PROTOCOL_ERROR);
    stream.respond({ ':status': 200 });
    app.emit('connection', stream);
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(15008, ip, resolve);
  });
  return {
    name,
    ip,
    clientSerials,
    close: async () => {
      for (const s of sessions) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** Everything around the waypoint. */
export interface ClusterRig {
  readonly pki: IstiodPki;
  readonly istiod: FakeIstiod;
  readonly kube: FakeKube;
  readonly dir: string;
  /** Where the waypoint reads its token (written by {@link writeToken}) and istiod's root (written by {@link writeRoot}). */
  readonly tokenFile: string;
  readonly rootFile: string;
  readonly kubeconfig: string;
  readonly pods: Pod[];
  /** The source workload's identity (`demo/client`), chained to the fake istiod's root. */
  readonly client: ClientIdentity;
  writeToken(): void;
  writeRoot(): void;
  /** The environment Istio's waypoint template gives the pod (POD_NAME, ..., CA_ADDR, PROXY_CONFIG). */
  env(instanceIp: string): Record<string, string>;
  close(): Promise<void>;
}

/** Start istiod at `<net>.1`, the API server at `<net>.2`, and a pod at each of `podIps`. */
export async function startClusterRig(net: string, podIps: readonly string[]): Promise<ClusterRig> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cluster-'));
  const closers: (() => unknown)[] = [() => fs.rmSync(dir, { recursive: true, force: true })];
  const close = async () => {
    for (const c of closers.splice(0).reverse()) await Promise.resolve().then(c).catch(() => {});
  };
  try {
    const pki = await IstiodPki.create();
    closers.push(() => pki.close());
    const istiod = await FakeIstiod.start({ pki, host: `${net}.1`, token: TOKEN });
    closers.push(() => istiod.stop());
    const kube = await FakeKube.start(`${net}.2`);
    closers.push(() => kube.close());
    kube.apply(namespace(NS));
    kube.apply(waypointGateway(NS));
    const pods: Pod[] = [];
    for (const [i, ip] of podIps.entries()) {
      const pod = await startPod(pki, `echo-${i + 1}`, ip);
      pods.push(pod);
      closers.push(() => pod.close());
    }
    const client = await istiodIdentity(pki, `spiffe://cluster.local/ns/${NS}/sa/client`);
    const tokenFile = path.join(dir, 'tokens', 'istio-token');
    const rootFile = path.join(dir, 'istio', 'root-cert.pem');
    return {
      pki,
      istiod,
      kube,
      dir,
      tokenFile,
      rootFile,
      kubeconfig: kube.kubeconfig(dir),
      pods,
      client,
      writeToken: () => {
        fs.mkdirSync(path.dirname(tokenFile), { recursive: true });
        fs.writeFileSync(tokenFile, `${TOKEN}\n`);
      },
      writeRoot: () => {
        fs.mkdirSync(path.dirname(rootFile), { recursive: true });
        fs.writeFileSync(rootFile, pki.rootCertPem);
      },
      env: (instanceIp) => ({
        POD_NAME: 'waypoint-5d8f7c9b4-x7k2p',
        POD_NAMESPACE: NS,
        INSTANCE_IP: instanceIp,
        SERVICE_ACCOUNT: 'waypoint',
        ISTIO_META_CLUSTER_ID: 'Kubernetes',
        CA_ADDR: istiod.address,
        PROXY_CONFIG: JSON.stringify({ discoveryAddress: istiod.address }),
      }),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** One request through the waypoint: CONNECT `<vip>:80` on `session`, then `GET path` inside it. */
export async function get(session: ClientHttp2Session, vip: string, p = '/'): Promise<{ status: number; pod?: string }> {
  const { status, stream } = await connect(session, `${vip}:80`);
  if (status !== 200) {
    stream.close();
    return { status };
  }
  try {
    const r = await exchange(stream, p);
    return { status: r.status, pod: r.status === 200 ? (JSON.parse(r.body) as { pod: string }).pod : undefined };
  } finally {
    stream.end();
  }
}

/** Wait until `pick()` resolves to something other than undefined; fails after `timeoutMs` naming `what`. */
export async function until<T>(pick: () => Promise<T | undefined>, what: string, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await pick();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** `GET /healthz/ready` of a readiness or admin address: status and body. */
export async function readiness(hostPort: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${hostPort}/healthz/ready`);
  return { status: res.status, body: await res.text() };
}

/**
 * Requests to one VIP through the waypoint, without pause, from `workers` sources, each opening a
 * new HBONE session every `perSession` requests (so new handshakes meet each certificate): every
 * request must answer 200.
 */
export class Load {
  ok = 0;
  readonly failures: string[] = [];
  /** Requests answered, by pod. */
  readonly byPod = new Map<string, number>();
  /** Serial numbers of the waypoint's certificates seen by the sources' handshakes. */
  readonly serverSerials = new Set<string>();
  /** Issuers of those certificates (the fake istiod's intermediate). */
  readonly serverIssuers = new Set<string>();
  #running = true;
  readonly #done: Promise<void>[] = [];

  constructor(target: { host: string; port: number }, client: ClientIdentity, vip: string, opts: { workers?: number; perSession?: number; pauseMs?: number } = {}) {
    for (let w = 0; w < (opts.workers ?? 2); w++) this.#done.push(this.#work(target, client, vip, opts.perSession ?? 10, opts.pauseMs ?? 5));
  }

  async #work(target: { host: string; port: number }, client: ClientIdentity, vip: string, perSession: number, pauseMs: number): Promise<void> {
    while (this.#running) {
      let session: ClientHttp2Session | undefined;
      try {
        session = await hboneSession(target.host, target.port, client);
        const cert = (session.socket as TLSSocket).getPeerX509Certificate();
        if (cert) {
          this.serverSerials.add(cert.serialNumber);
          this.serverIssuers.add(cert.issuer);
        }
        for (let i = 0; i < perSession && this.#running; i++) {
          const r = await get(session, vip);
          if (r.status === 200) {
            this.ok += 1;
            this.byPod.set(r.pod!, (this.byPod.get(r.pod!) ?? 0) + 1);
          } else this.failures.push(`HTTP ${r.status}`);
          await sleep(pauseMs);
        }
      } catch (err) {
        this.failures.push((err as Error).message);
        await sleep(50);
      } finally {
        session?.close();
      }
    }
  }

  /** The count of requests answered so far by `pod`. */
  served(pod: string): number {
    return this.byPod.get(pod) ?? 0;
  }

  async stop(): Promise<void> {
    this.#running = false;
    await Promise.all(this.#done);
  }
}
