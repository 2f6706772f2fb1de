/**
 * Test identities: a mesh CA (a topology's, or one of its own in a temp directory) and workload
 * certificates from it, as the TLS material an HBONE client presents or as a renewing
 * WorkloadCertificate for a role.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LocalCa } from '../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../src/identity/workload-certificate.ts';
import type { ClientIdentity } from './hbone-client.ts';

/** Lifetime of test certificates: longer than any test. */
const TTL_MS = 3600_000;

/** The SPIFFE id of service account `<ns>/<sa>` (Istio's `spiffe://<td>/ns/<ns>/sa/<sa>`). */
export const spiffe = (ns: string, sa: string, trustDomain = 'cluster.local'): string => `spiffe://${trustDomain}/ns/${ns}/sa/${sa}`;

/** A mesh CA and the identities issued from it (one certificate per principal, issued once). */
export class TestCa {
  readonly ca: LocalCa;
  /** Where the root lives (`--ca-dir`). */
  readonly dir: string;
  readonly #ownDir: string | undefined;
  readonly #issued = new Map<string, Promise<ClientIdentity>>();

  private constructor(ca: LocalCa, dir: string, ownDir: string | undefined) {
    this.ca = ca;
    this.dir = dir;
    this.#ownDir = ownDir;
  }

  /** A new CA for `trustDomain` in a temp directory of its own (removed by {@link close}). */
  static async create(trustDomain = 'cluster.local'): Promise<TestCa> {
    const own = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-test-ca-'));
    const dir = path.join(own, 'ca');
    return new TestCa((await LocalCa.ensure(dir, trustDomain)).ca, dir, own);
  }

  /** The CA in `dir` (e.g. a topology's `caDir`). */
  static async load(dir: string): Promise<TestCa> {
    return new TestCa(await LocalCa.load(dir), dir, undefined);
  }

  get rootCertPem(): string {
    return this.ca.rootCertPem;
  }

  /** TLS material for `principal` (a full `spiffe://` URI), issued once and reused. */
  identity(principal: string): Promise<ClientIdentity> {
    let id = this.#issued.get(principal);
    if (!id) {
      id = this.fresh(principal);
      this.#issued.set(principal, id);
    }
    return id;
  }

  /** A new certificate for `principal` on every call (new key, new serial). */
  async fresh(principal: string, ttlMs = TTL_MS): Promise<ClientIdentity> {
    const leaf = await this.ca.issue(principal, ttlMs);
    return { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: this.ca.rootCertPem };
  }

  /** A renewing workload certificate for a role (close it when done). */
  workloadCertificate(principal: string): Promise<WorkloadCertificate> {
    return WorkloadCertificate.start(this.ca, principal, TTL_MS);
  }

  /** Remove the CA directory when this CA created it. */
  close(): void {
    if (this.#ownDir) fs.rmSync(this.#ownDir, { recursive: true, force: true });
  }
}

/** TLS material for `principal` (default `demo/client`, the topology's client pod) from the CA in `caDir`. */
export async function identityFrom(caDir: string, principal = spiffe('demo', 'client')): Promise<ClientIdentity> {
  return (await TestCa.load(caDir)).fresh(principal);
}
