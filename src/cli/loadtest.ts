/**
 * `waypoint loadtest`: load-test a waypoint (ours or Envoy's) over HBONE with a mesh identity, or
 * a plain TCP target; `waypoint loadtest compare A.json B.json`: two results side by side.
 * Exit codes: 0 done (even with request errors: they are in the result), 1 the run failed (the
 * path does not work at all, a file could not be written), 2 a usage error (a bad flag, a cap, a
 * non-loopback destination without --allow-remote; compare: a result that measured nothing),
 * 130 interrupted (Ctrl-C; what ran is still reported and written, unless nothing was measured).
 */
import fs from 'node:fs';
import path from 'node:path';
import { Command, type CommanderError } from 'commander';
import { ISTIO_ROOT_HINT, WorkloadCertificate } from '../identity/index.ts';
import type { ClientIdentity, LoadtestFlags, LoadtestSettings } from '../loadtest/index.ts';
import { checkTrustRoot } from './flags.ts';

// The load generator (HDR histograms, D3, the progress bar) is loaded when a load test runs, not
// by every command: `waypoint run` would carry it in its memory for nothing.
const loadtest = () => import('../loadtest/index.ts');

/** `--in-cluster` defaults: an Istio pod's paths and istiod's address. */
const IN_CLUSTER_DEFAULTS = Object.freeze({
  istiod: 'istiod.istio-system.svc:15012',
  rootFile: '/var/run/secrets/istio/root-cert.pem',
  tokenFile: '/var/run/secrets/tokens/istio-token',
  trustDomain: 'cluster.local',
  clusterId: 'Kubernetes',
});

interface Flags extends LoadtestFlags {
  identity?: string;
  ca?: string;
  inCluster?: boolean;
  istiod?: string;
  tokenFile?: string;
  trustDomain?: string;
  clusterId?: string;
  pid?: string;
  admin?: string;
  statsUrl?: string[];
  json?: string;
  report?: string;
  progress: boolean;
}

const VERSION = (() => {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, '../../package.json'), 'utf8')) as { name: string; version: string };
    return `${pkg.name} ${pkg.version}`;
  } catch {
    return 'node-waypoint';
  }
})();

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** Exit status of a run stopped by Ctrl-C (or SIGTERM): 128 + SIGINT, as a shell reports it. */
const INTERRUPTED_EXIT = 130;

/** Print `waypoint: <message>` and exit with `code`. */
function exit(code: number, message: string): never {
  process.stderr.write(`waypoint: ${message}\n`);
  process.exit(code);
}

/** Usage errors (LoadtestUsageError) exit 2, everything else 1. */
function failed(err: unknown): never {
  if (err instanceof Error && err.name === 'LoadtestUsageError') exit(2, err.message);
  exit(1, err instanceof Error ? err.message : String(err));
}

/** Commander's own parse errors (unknown flag, missing value) are usage errors too: exit 2. */
function usageExits(cmd: Command): Command {
  return cmd.exitOverride((err: CommanderError) => process.exit(err.exitCode === 0 ? 0 : 2));
}

async function loadIdentity(f: Flags, s: LoadtestSettings): Promise<ClientIdentity | undefined> {
  if (s.via.kind !== 'hbone') return undefined;
  const { LoadtestUsageError, inClusterIdentity } = await loadtest();
  // --ca must be the mesh root (a key or a workload certificate would fail at the first handshake
  // as "self-signed certificate in certificate chain"), as `waypoint tunnel` checks it.
  const checkCa = async (file: string, hint?: string) => {
    try {
      await checkTrustRoot(file, hint);
    } catch (err) {
      throw new LoadtestUsageError((err as Error).message);
    }
  };
  if (f.inCluster) {
    if (f.identity) throw new LoadtestUsageError('give --identity or --in-cluster, not both');
    await checkCa(f.ca ?? IN_CLUSTER_DEFAULTS.rootFile, ISTIO_ROOT_HINT);
    // Long enough for the whole run; nothing renews it meanwhile.
    const validitySeconds = Math.max(3600, Math.ceil(((s.durationMs ?? 0) + s.warmupMs) / 1000) + 600);
    const id = await inClusterIdentity({
      istiod: f.istiod ?? IN_CLUSTER_DEFAULTS.istiod,
      rootFile: f.ca ?? IN_CLUSTER_DEFAULTS.rootFile,
      tokenFile: f.tokenFile ?? IN_CLUSTER_DEFAULTS.tokenFile,
      trustDomain: f.trustDomain ?? IN_CLUSTER_DEFAULTS.trustDomain,
      clusterId: f.clusterId ?? IN_CLUSTER_DEFAULTS.clusterId,
      validitySeconds,
    });
    process.stderr.write(`waypoint: in-cluster identity ${id.spiffe} from istiod ${f.istiod ?? IN_CLUSTER_DEFAULTS.istiod}\n`);
    return { material: () => id.material, trustDomain: id.trustDomain };
  }
  if (!f.identity || !f.ca) throw new LoadtestUsageError('an HBONE run needs the client identity: --identity PREFIX (PREFIX-cert.pem, PREFIX-key.pem) and --ca ROOT (the mesh root certificate), or --in-cluster');
  await checkCa(f.ca);
  let cert: WorkloadCertificate;
  try {
    cert = await WorkloadCertificate.fromPrefix(f.identity, f.ca);
  } catch (err) {
    throw new LoadtestUsageError(`--identity ${f.identity}: ${(err as Error).message}`);
  }
  return { material: () => cert.current, trustDomain: cert.spiffeId.trustDomain };
}

/** A TLS failure of the first HBONE connection most often means the identity files: say which flags to check. */
function tlsHint(err: unknown, f: Flags): unknown {
  if (!(err instanceof Error) || err.name !== 'LoadProbeError' || (err.cause as { reason?: string } | undefined)?.reason !== 'TLS_FAILURE') return err;
  const hint = f.inCluster
    ? "the waypoint must trust istiod's CA, and --ca must be the mesh root"
    : `the waypoint must trust the issuer of --identity ${f.identity}, and --ca ${f.ca} must be the root of the waypoint's certificate`;
  return new Error(`${err.message}\n  check the identity: ${hint}`, { cause: err });
}

/**
 * `--json`/`--report` must be writable before the run, not found unwritable after it: the file a
 * writable regular file or absent from a writable directory. Nothing is created or truncated here.
 * @throws Error naming the flag and the file.
 */
function checkWritable(flag: string, file: string): void {
  const fail = (why: string): never => {
    throw new Error(`${flag} ${file}: ${why}`);
  };
  let st: fs.Stats | undefined;
  try {
    st = fs.statSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') fail((err as Error).message);
  }
  if (st?.isDirectory()) fail('is a directory; give a file name');
  const dir = path.dirname(path.resolve(file));
  try {
    fs.accessSync(st ? file : dir, fs.constants.W_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') fail(`the directory ${dir} does not exist`);
    fail(st ? 'the file is not writable' : `the directory ${dir} is not writable`);
  }
}

function writeFile(flag: string, file: string, text: string): void {
  try {
    fs.writeFileSync(file, text);
  } catch (err) {
    throw new Error(`${flag} ${file}: ${(err as Error).message}`, { cause: err });
  }
}

async function run(f: Flags): Promise<void> {
  const { LoadtestUsageError, checkLoopback, formatSummary, incompleteOf, progressDisplay, renderReport, resolveSettings, runLoadtest } = await loadtest();
  const settings = resolveSettings(f);
  await checkLoopback(settings, f.allowRemote === true);
  let pid: number | undefined;
  if (f.pid !== undefined) {
    pid = Number(f.pid);
    if (!Number.isInteger(pid) || pid <= 0) throw new LoadtestUsageError(`--pid ${f.pid}: expected a process id`);
  }
  if (f.admin !== undefined && pid !== undefined) throw new LoadtestUsageError('give --pid or --admin, not both: they measure the same waypoint two ways');
  for (const [flag, u] of [['--admin', f.admin], ...(f.statsUrl ?? []).map((x) => ['--stats-url', x])] as [string, string | undefined][]) {
    if (u !== undefined && !/^https?:\/\/[^/]+/.test(u)) throw new LoadtestUsageError(`${flag} ${JSON.stringify(u)}: expected an http:// URL`);
  }
  try {
    if (f.json) checkWritable('--json', f.json);
    if (f.report) checkWritable('--report', f.report);
  } catch (err) {
    throw new LoadtestUsageError((err as Error).message);
  }
  const identity = await loadIdentity(f, settings);
  // Ctrl-C ends the run early (its figures are still reported); a second one exits at once.
  const abort = new AbortController();
  const onSignal = () => {
    if (abort.signal.aborted) process.exit(130);
    process.stderr.write('\nwaypoint: stopping the load test (Ctrl-C again to quit now)\n');
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const report = await runLoadtest({
    settings,
    identity,
    pid,
    admin: f.admin,
    statsUrls: f.statsUrl,
    progress: f.progress ? progressDisplay(process.stderr) : undefined,
    signal: abort.signal,
    version: VERSION,
  }).catch((err: unknown) => {
    throw tlsHint(err, f);
  });
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  // Interrupted: the shell's status for SIGINT (128 + 2), so a script does not take it for a full run.
  if (report.loadtest.window.interrupted) process.exitCode = INTERRUPTED_EXIT;
  if (report.loadtest.window.completed === 0 && report.loadtest.window.interrupted) {
    // Zeros would overwrite a good result and compare as "better": nothing is written.
    const files = [f.json, f.report].filter(Boolean);
    process.stderr.write(`waypoint: ${incompleteOf(report)}${files.length > 0 ? `; not written: ${files.join(', ')}` : ''}\n`);
    return;
  }
  process.stdout.write(formatSummary(report));
  if (f.json) writeFile('--json', f.json, `${JSON.stringify(report, null, 2)}\n`);
  if (f.report) writeFile('--report', f.report, renderReport(report));
  const wrote = [f.json, f.report].filter(Boolean);
  if (wrote.length > 0) process.stdout.write(`  wrote ${wrote.join(', ')}\n`);
}

function compareCommand(): Command {
  return usageExits(
    new Command('compare')
      .description('compare two load-test results (--json files): every figure as B ÷ A, printed, and plotted with --report')
      .argument('<a.json>', 'the baseline run (A)')
      .argument('<b.json>', 'the run compared with it (B)')
      .option('--report <file.html>', 'write the comparison as one HTML page (ratio bars, both runs overlaid)')
      .action(async (a: string, b: string, _o: unknown, self: Command) => {
        const { checkComparable, compareReports, formatComparison, readReport, renderCompare } = await loadtest();
        // The root command reads options anywhere on the line, so `loadtest` may have taken
        // `--report` for itself before handing `compare` its arguments.
        const o = self.optsWithGlobals<{ report?: string }>();
        let ra;
        let rb;
        try {
          ra = readReport(a);
          rb = readReport(b);
          checkComparable(ra, a);
          checkComparable(rb, b);
        } catch (err) {
          exit(2, (err as Error).message);
        }
        const c = compareReports(ra, rb);
        for (const w of c.warnings) process.stderr.write(`waypoint: warning: ${w}\n`);
        process.stdout.write(formatComparison(c));
        if (o.report) {
          try {
            writeFile('--report', o.report, renderCompare(ra, rb, c));
          } catch (err) {
            failed(err);
          }
          process.stdout.write(`wrote ${o.report}\n`);
        }
      }),
  );
}

/** The `loadtest` command (with its `compare` subcommand). */
export function loadtestCommand(): Command {
  const cmd = new Command('loadtest')
    .description('load-test a waypoint over HBONE with a mesh identity (or a plain TCP target): fixed rate or saturation, JSON result, HTML report')
    .option('--waypoint <host:port>', 'HBONE server to CONNECT through (the waypoint, port 15008)')
    .option('--authority <vip:port>', 'CONNECT :authority: the service VIP:port behind the waypoint')
    .option('--target <host:port>', 'plain TCP instead of HBONE (a baseline without the waypoint)')
    .option('--identity <prefix>', 'client workload certificate (PREFIX-cert.pem, PREFIX-key.pem), for HBONE')
    .option('--ca <file>', `mesh root certificate (root-cert.pem), for HBONE (with --in-cluster default ${IN_CLUSTER_DEFAULTS.rootFile})`)
    .option('--in-cluster', "the pod's own mesh identity: a certificate from istiod's CA for its service account token")
    .option('--istiod <host:port>', `with --in-cluster: istiod's CA (default ${IN_CLUSTER_DEFAULTS.istiod})`)
    .option('--token-file <file>', `with --in-cluster: token with audience istio-ca (default ${IN_CLUSTER_DEFAULTS.tokenFile})`)
    .option('--trust-domain <td>', `with --in-cluster: the mesh trust domain (default ${IN_CLUSTER_DEFAULTS.trustDomain})`)
    .option('--cluster-id <id>', `with --in-cluster: istiod's cluster id (default ${IN_CLUSTER_DEFAULTS.clusterId})`)
    .option('--expect-san <uri>', 'SPIFFE identity the waypoint must present (default: any of the trust domain)')
    .option('--bind <ip>', 'source IP of the HBONE connections (also sent in the forwarded header)')
    .option('--tunnels-per-connection <n>', 'CONNECT tunnels per HBONE connection (ztunnel: 100)')
    .option('--connect-header <name: value>', 'extra CONNECT header, e.g. "baggage: ..." (repeatable)', collect)
    .option('--protocol <p>', 'inside each connection: http1, h2c or grpc', 'http1')
    .option('--rate <req/s>', 'open loop at this rate (latency corrected for coordinated omission); leave out for closed-loop saturation (capped: --max-rate)')
    .option('--connections <n>', 'connections (tunnels); with --streams, capped: --max-connections (default: 16 closed loop; open loop rate/100, 1 to 64)')
    .option('--streams <n>', 'requests in flight per connection (h2c, grpc; HTTP/1.1 has 1) (default: 8 for h2c and grpc)')
    .option('--requests <n>', 'measure this many requests (this or --duration is required)')
    .option('--duration <d>', 'measure for this long, e.g. 30s (this or --requests is required)')
    .option('--warmup <d>', 'the same load, not measured, first (e.g. 5s)')
    .option('--method <m>', 'HTTP method', 'GET')
    .option('--path <p>', 'request path', '/')
    .option('--host <h>', 'Host header / :authority inside the tunnel (default: --authority)')
    .option('--header <name: value>', 'request header (repeatable)', collect)
    .option('--body-size <bytes>', 'request body (gRPC: message) bytes', '0')
    .option('--grpc-method <m>', 'gRPC method for --protocol grpc', '/grpc.health.v1.Health/Check')
    .option('--timeout <d>', 'per request', '10s')
    .option('--interval <d>', 'resolution of the time series and progress', '1s')
    .option('--max-rate <req/s>', 'raise the cap on --rate (the refusal names the cap)')
    .option('--max-connections <n>', 'raise the cap on connections and requests in flight')
    .option('--allow-remote', 'allow a destination that is not on this machine (refused by default)')
    .option('--pid <pid>', "the waypoint's process on this machine: its CPU and RSS over time (/proc)")
    .option('--admin <url>', "a node-waypoint admin URL (http://HOST:15020): its CPU and RSS over time")
    .option('--stats-url <url>', 'a /stats/prometheus URL (Envoy or node-waypoint) scraped before and after (repeatable)', collect)
    .option('--json <file>', "write the result as JSON (fortio's shape, plus a versioned loadtest section)")
    .option('--report <file.html>', 'write a self-contained HTML report with charts')
    .option('--label <text>', 'name of this run in reports and comparisons')
    .option('--no-progress', 'no live progress line')
    .action(async (f: Flags) => {
      try {
        await run(f);
      } catch (err) {
        failed(err);
      }
    });
  cmd.addCommand(compareCommand());
  return usageExits(cmd);
}
