/**
 * `waypoint ca init|issue`: manage the local mesh CA ({@link LocalCa}) and issue workload
 * certificates for the `tunnel`/`inbound` roles (`--identity PREFIX --ca ROOT`).
 */
import { Command } from 'commander';
import { X509Certificate } from 'node:crypto';
import { mkdir, writeFile, chmod } from 'node:fs/promises';
import path from 'node:path';
import { LocalCa, ROOT_CERT_FILE, ROOT_KEY_FILE, defaultCaDir, parseTtl } from '../identity/index.ts';

/** Run `fn`; on error print `waypoint ca: <message>` to stderr and set `process.exitCode = 1`. */
async function report(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    process.stderr.write(`waypoint ca: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  }
}

/**
 * The `ca` command: `ca init [--dir DIR] [--trust-domain TD] [--force]` and
 * `ca issue [--dir DIR] --spiffe ID --out PREFIX [--ttl 24h]`. Results go to stdout; failures
 * to stderr as `waypoint ca: <message>` with exit code 1.
 */
export function caCommand(): Command {
  const ca = new Command('ca').description('manage the local mesh CA and issue workload certificates');

  ca.command('init')
    .description(`create a self-signed mesh root (${ROOT_CERT_FILE} + ${ROOT_KEY_FILE}, Istio plugged-CA names)`)
    .option('--dir <dir>', 'CA directory', defaultCaDir())
    .option('--trust-domain <td>', 'mesh trust domain (root subject O=)', 'cluster.local')
    .option('--force', 'replace an existing root', false)
    .action((opts: { dir: string; trustDomain: string; force: boolean }) =>
      report(async () => {
        const c = await LocalCa.init(opts.dir, opts.trustDomain, { force: opts.force });
        process.stdout.write(
          `wrote ${path.join(opts.dir, ROOT_CERT_FILE)}\nwrote ${path.join(opts.dir, ROOT_KEY_FILE)}\ntrust domain: ${c.trustDomain}\n`,
        );
      }),
    );

  ca.command('issue')
    .description('issue a workload certificate: PREFIX-cert.pem (leaf only) and PREFIX-key.pem')
    .option('--dir <dir>', 'CA directory', defaultCaDir())
    .requiredOption('--spiffe <id>', 'SPIFFE id, spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>')
    .requiredOption('--out <prefix>', 'output path prefix')
    .option('--ttl <duration>', 'certificate lifetime', '24h')
    .action((opts: { dir: string; spiffe: string; out: string; ttl: string }) =>
      report(async () => {
        const ttlMs = parseTtl(opts.ttl);
        if (ttlMs < 1_000) throw new Error(`--ttl ${opts.ttl} is too short: a certificate must live at least 1s`);
        const c = await LocalCa.load(opts.dir);
        const rootExpiry = new Date(new X509Certificate(c.rootCertPem).validTo);
        if (Date.now() + ttlMs > rootExpiry.getTime()) {
          throw new Error(`--ttl ${opts.ttl} would outlive the CA root, which expires ${rootExpiry.toISOString()}`);
        }
        const issued = await c.issue(opts.spiffe, ttlMs);
        const certFile = `${opts.out}-cert.pem`;
        const keyFile = `${opts.out}-key.pem`;
        await mkdir(path.dirname(path.resolve(certFile)), { recursive: true });
        await writeFile(keyFile, issued.keyPem, { mode: 0o600 });
        await chmod(keyFile, 0o600);
        await writeFile(certFile, issued.certPem);
        process.stdout.write(
          `wrote ${certFile}\nwrote ${keyFile}\nspiffe: ${issued.spiffe}\nnot after: ${issued.notAfter.toISOString()}\nCA: ${path.join(opts.dir, ROOT_CERT_FILE)}\n`,
        );
      }),
    );

  return ca;
}
