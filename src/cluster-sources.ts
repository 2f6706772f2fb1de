/**
 * The in-cluster waypoint's sources (`waypoint run --cluster`): its identity from istiod's CA, its
 * workloads and services from istiod's WDS, and its policies, routes, Gateway and MeshConfig from
 * the Kubernetes API, compiled together into the mesh snapshots. Never a local CA.
 *
 * Opening waits, without failing, for what readiness needs: the first full WDS sync, the first
 * list of every watched kind, a mesh that compiles, then the first certificate. A missing token or
 * root file, or istiod or the API server away, is logged by the client concerned and retried with
 * backoff; what is still awaited is said on the readiness endpoint and logged every 30 s.
 */
import { ConfigError, log } from './util/index.ts';
import { TrustRootFiles, WorkloadCertificate } from './identity/index.ts';
import { IstiodCertificateIssuer, IstiodChannel, registerCertificateMetrics, registerWdsMetrics, WdsClient, wdsDiscoveredMesh } from './istiod/index.ts';
import { KubeWatcher, loadKubeConfig, openClusterMesh, type ClusterMesh } from './kube/index.ts';
import type { ClusterSettings } from './cluster-env.ts';
import { unlessAborted, type SourceContext, type WaypointSources } from './sources.ts';

/** How often a waypoint still not ready says what it waits for. */
const WAITING_LOG_MS = 30_000;

/**
 * Open istiod's and the Kubernetes API's sources and wait until the waypoint can serve.
 * @throws ConfigError when the pod's identity is not its Gateway's, or TRUST_DOMAIN is not the
 *   mesh's; the signal's reason when it aborts first; nothing is left open then.
 */
export async function openClusterSources(s: ClusterSettings, ctx: SourceContext): Promise<WaypointSources> {
  const closers: (() => unknown)[] = [];
  let closed: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closed ??= (async () => {
      for (const c of closers.reverse()) {
        await Promise.resolve()
          .then(c)
          .catch((err: unknown) => log.warn({ err }, 'in-cluster sources: closing failed'));
      }
    })());
  let nag: NodeJS.Timeout | undefined;
  try {
    // First: no client configuration at all (not in a pod, no KUBECONFIG) is an error, not a wait.
    const kubeConfig = s.kubeConfig ?? loadKubeConfig();
    const roots = await TrustRootFiles.open([s.rootCertFile], { pollMs: s.rootPollMs });
    closers.push(() => roots.close());
    const channel = (address: string) => new IstiodChannel({ address, roots, tokenFile: s.tokenFile, clusterId: s.clusterId });
    const caChannel = channel(s.caAddress);
    closers.push(() => caChannel.close());
    // One channel when the CA and xDS are the same istiod (the default), as ztunnel shares it.
    const xdsChannel = s.discoveryAddress === s.caAddress ? caChannel : channel(s.discoveryAddress);
    if (xdsChannel !== caChannel) closers.push(() => xdsChannel.close());
    const watcher = new KubeWatcher({ kubeConfig, backoff: s.retry?.kube });
    closers.push(() => watcher.stop());
    const wds = new WdsClient({ channel: xdsChannel, node: s.node, backoff: s.retry?.istiod });
    closers.push(() => wds.close());
    registerWdsMetrics(ctx.metrics, wds);

    let mesh: ClusterMesh | undefined;
    let certificate: WorkloadCertificate | undefined;
    const waitingFor = (): string => {
      const what: string[] = [];
      if (roots.pem === undefined) what.push(`istiod's root certificate (${roots.problem ?? s.rootCertFile})`);
      if (!wds.synced) what.push(`the first workload discovery (WDS) sync from istiod at ${xdsChannel.target}${wds.lastError ? ` (last error: ${wds.lastError})` : ''}`);
      const unlisted = watcher.status().filter((k) => !k.synced);
      if (unlisted.length > 0) what.push(`the first list from the Kubernetes API of ${unlisted.map((k) => (k.error ? `${k.kind} (${k.error})` : k.kind)).join(', ')}`);
      else if (wds.synced && !mesh) what.push(`a mesh that compiles (is the Gateway ${s.gateway} there?)`);
      if (!certificate?.issued) what.push(`the first certificate from istiod's CA at ${caChannel.target}${certificate ? certificateProblem(certificate) : ''}`);
      return what.join('; ');
    };
    ctx.waiting?.(waitingFor);
    log.info(
      { ca: caChannel.target, discovery: xdsChannel.target, rootCertFile: s.rootCertFile, tokenFile: s.tokenFile, gateway: s.gateway, node: s.node.id },
      'in-cluster mode: ready once istiod has synced workloads and issued the certificate and every watched kind is listed',
    );
    nag = setInterval(() => log.warn({ waitingFor: waitingFor() }, 'not ready yet'), WAITING_LOG_MS);
    nag.unref();
    watcher.start();
    wds.start();

    // The first compile has the first full WDS state; later pushes recompile.
    await unlessAborted(wds.whenSynced(), ctx.signal);
    const onUpdate = () => void mesh?.refresh();
    wds.on('update', onUpdate);
    closers.push(() => wds.off('update', onUpdate));
    const seen = wds.state.version;
    mesh = await openClusterMesh({
      watcher,
      discovered: wdsDiscoveredMesh(wds, { instanceIps: [s.instanceIp], network: s.network }),
      gateway: s.gateway,
      clusterId: s.clusterId,
      parts: ctx.parts,
      accept: ctx.accept,
      signal: ctx.signal,
    });
    const opened = mesh;
    closers.push(() => opened.close());
    // A push while the first snapshot compiled.
    if (wds.state.version !== seen) void mesh.refresh();

    const spiffe = identityOf(s, mesh);
    certificate = WorkloadCertificate.begin(new IstiodCertificateIssuer({ channel: caChannel, roots }), spiffe, ctx.certTtlMs, s.retry?.certificate);
    const cert = certificate;
    closers.push(() => cert.close());
    registerCertificateMetrics(ctx.metrics, cert);
    await unlessAborted(cert.ready, ctx.signal);
    clearInterval(nag);
    return {
      mesh: mesh.store,
      certificate: cert,
      origin: {
        mode: 'cluster',
        caAddress: caChannel.target,
        discoveryAddress: xdsChannel.target,
        rootCertFile: s.rootCertFile,
        tokenFile: s.tokenFile,
        apiServer: kubeConfig.getCurrentCluster()?.server ?? '',
      },
      close,
    };
  } catch (err) {
    clearInterval(nag);
    await close();
    throw err;
  }
}

/**
 * The SPIFFE id the certificate is asked for: the pod's service account in the trust domain
 * (TRUST_DOMAIN, else MeshConfig's). istiod signs only the caller's own identity, and the mesh
 * knows the waypoint as its Gateway's: the two must be the same.
 */
function identityOf(s: ClusterSettings, mesh: ClusterMesh): string {
  const snap = mesh.store.current;
  const meshTd = snap.meshConfig.trustDomain;
  if (s.trustDomain !== undefined && s.trustDomain !== meshTd) {
    throw new ConfigError(
      `TRUST_DOMAIN is "${s.trustDomain}" but the mesh's trust domain is "${meshTd}" (MeshConfig trustDomain of the istio ConfigMap in istio-system, default cluster.local); make them the same`,
    );
  }
  const spiffe = `spiffe://${meshTd}/ns/${s.podNamespace}/sa/${s.serviceAccount}`;
  if (spiffe !== snap.waypoint.identity) {
    throw new ConfigError(
      `the pod's identity ${spiffe} (POD_NAMESPACE, SERVICE_ACCOUNT) is not the identity of its Gateway ${snap.waypoint.namespace}/${snap.waypoint.name}, ` +
        `${snap.waypoint.identity} (Istio names a waypoint's service account after its Gateway); run the pod as service account ${snap.waypoint.name} in ${snap.waypoint.namespace}, or give --gateway`,
    );
  }
  return spiffe;
}

/** `: <last issuance error>` while the first certificate is awaited, else ''. */
function certificateProblem(c: WorkloadCertificate): string {
  try {
    void c.current;
    return '';
  } catch (err) {
    const m = /^no workload certificate yet: (.*)$/s.exec((err as Error).message);
    return m ? ` (${m[1]})` : '';
  }
}
