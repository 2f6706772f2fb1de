/**
 * The standalone waypoint's sources (`waypoint run --mesh FILE`): mesh state from a YAML file
 * (watched), and its certificate from a local mesh CA standing in for istiod's (created in the
 * state directory on first use, or the one in `--ca-dir`).
 */
import path from 'node:path';
import { type CertificateIssuer, LocalCa, defaultCaDir, WorkloadCertificate } from './identity/index.ts';
import { MeshStore } from './state/index.ts';
import { ConfigError } from './util/index.ts';
import type { SourceContext, WaypointSources } from './sources.ts';

/** The mesh file and the CA of a standalone waypoint. */
export interface FileSourceOptions {
  /** Mesh YAML (Kubernetes + Istio objects). Watched for changes. */
  readonly meshFile: string;
  /** MeshConfig YAML; overrides the `istio` ConfigMap of the mesh file. */
  readonly meshConfigFile?: string;
  /** `namespace/name` of the waypoint Gateway when the mesh file has several. */
  readonly gateway?: string;
  /** CA directory (root-cert.pem, root-key.pem). Default: `<state dir>/ca`, created on first use. */
  readonly caDir?: string;
  /** Watch the mesh file (default true). */
  readonly watch?: boolean;
  /**
   * Issue from this instead of the local CA: a worker process (`--concurrency`), whose certificate
   * the primary holds and pushes (src/workers).
   */
  readonly issuer?: CertificateIssuer & { readonly trustDomain: string };
}

/**
 * Load and compile the mesh file, then issue the waypoint's certificate from the local CA.
 * @throws ConfigError for an invalid mesh, or a CA whose trust domain is not the mesh's; nothing
 *   is left open then.
 */
export async function openFileSources(o: FileSourceOptions, ctx: SourceContext): Promise<WaypointSources> {
  const mesh = await MeshStore.open({
    meshFile: o.meshFile,
    meshConfigFile: o.meshConfigFile,
    gateway: o.gateway,
    watch: o.watch ?? true,
    // An invalid AuthorizationPolicy, RequestAuthentication, DestinationRule, NetworkPolicy or
    // PeerAuthentication stops the start, or refuses the whole update (the last good state stays
    // enforced), naming the file, line, object and field.
    parts: ctx.parts,
    accept: ctx.accept,
  });
  try {
    const snap = mesh.current;
    const trustDomain = snap.meshConfig.trustDomain;
    const { ca, caDir, created } = o.issuer ? { ca: o.issuer, caDir: path.resolve(o.caDir ?? defaultCaDir()), created: false } : await meshCa(o, trustDomain);
    checkCaTrustDomain(ca.trustDomain, caDir, trustDomain, o);
    const certificate = await WorkloadCertificate.start(ca, snap.waypoint.identity, ctx.certTtlMs);
    let closed = false;
    return {
      mesh,
      certificate,
      origin: { mode: 'file', meshFile: o.meshFile, caDir, caCreated: created },
      async close() {
        if (closed) return;
        closed = true;
        certificate.close();
        mesh.close();
      },
    };
  } catch (err) {
    mesh.close();
    throw err;
  }
}

/** The standalone mesh CA: `caDir`'s, or the state directory's (created on first use for `trustDomain`). */
export async function meshCa(o: Pick<FileSourceOptions, 'caDir'>, trustDomain: string): Promise<{ ca: LocalCa; caDir: string; created: boolean }> {
  const caDir = path.resolve(o.caDir ?? defaultCaDir());
  const { ca, created } = o.caDir ? { ca: await LocalCa.load(caDir), created: false } : await LocalCa.ensure(caDir, trustDomain);
  return { ca, caDir, created };
}

/** @throws ConfigError naming the mesh (config) file when the CA's trust domain is not the mesh's. */
export function checkCaTrustDomain(caTrustDomain: string, caDir: string, trustDomain: string, o: Pick<FileSourceOptions, 'meshFile' | 'meshConfigFile'>): void {
  if (caTrustDomain === trustDomain) return;
  throw new ConfigError(
    `the CA in ${caDir} is for trust domain "${caTrustDomain}" but the mesh's trustDomain is "${trustDomain}" ` +
      `(MeshConfig trustDomain, default cluster.local); use a CA of that trust domain (waypoint ca init --trust-domain ${trustDomain}) or set trustDomain in the mesh config`,
    { file: o.meshConfigFile ?? o.meshFile },
  );
}
