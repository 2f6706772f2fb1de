/**
 * `waypoint run`: the waypoint itself, standalone (`--mesh FILE`: mesh state from YAML, a local
 * CA) or in a Kubernetes cluster (`--cluster`: identity and workloads from istiod, config from the
 * Kubernetes API). Exactly one of the two.
 */
import { Command, Option } from 'commander';
import { clusterSettingsFromEnv, DEFAULT_ROOT_CERT_FILE, DEFAULT_TOKEN_FILE, Waypoint, addr, type SourceOrigin } from '../app.ts';
import { loadBootstrap, overrideBootstrap } from '../config/index.ts';
import { WaypointWorkers, defaultConcurrency, parseConcurrency } from '../workers/index.ts';
import { checkListenFlag, durationFlag, namingListenFlags, writePidFile, type ListenFlag } from './flags.ts';
import { onTerminate } from './signals.ts';

interface RunOptions {
  mesh?: string;
  cluster?: boolean;
  config?: string;
  meshConfig?: string;
  caDir?: string;
  gateway?: string;
  tokenFile?: string;
  rootCert?: string;
  hbone?: string;
  admin?: string;
  readiness?: string;
  pidFile?: string;
  drainDelay?: number;
  drainTimeout?: number;
  concurrency?: string;
}

/**
 * The usage check commander cannot express: one of `--mesh` and `--cluster` is required (its
 * `conflicts()` refuses both). A usage error (exit 2); run before any action hook (program.ts).
 */
export function checkRunUsage(cmd: Command): void {
  const o = cmd.opts<RunOptions>();
  if (!o.mesh && !o.cluster) cmd.error('error: one of --mesh <file> (standalone) or --cluster (in a Kubernetes cluster) is required', { exitCode: 2, code: 'waypoint.missingMode' });
}

/** The `run` command. Config errors propagate as ConfigError (printed as `file:line: ...`, exit 1). */
export function runCommand(): Command {
  return new Command('run')
    .description('run the waypoint: HBONE listener, filter chain, HBONE upstream')
    .addOption(new Option('--mesh <file>', 'mesh state: multi-document YAML of Namespace, Service, Pod, ServiceEntry, WorkloadEntry, Gateway, istio ConfigMap, policies (watched); standalone, with a local CA (required: this or --cluster)').conflicts('cluster'))
    .addOption(new Option('--cluster', "in a Kubernetes cluster: identity and workloads from istiod, policies and routes from the Kubernetes API, settings from the env of Istio's waypoint pod template (required: this or --mesh)"))
    .option('--config <file>', 'bootstrap config (waypoint.yaml): listeners, filters, limits, timeouts')
    .addOption(new Option('--mesh-config <file>', 'with --mesh: Istio MeshConfig YAML (overrides the istio ConfigMap in the mesh file)').conflicts('cluster'))
    .addOption(new Option('--ca-dir <dir>', 'with --mesh: mesh CA directory with root-cert.pem and root-key.pem (default: the state directory CA, created on first use)').conflicts('cluster'))
    .option('--gateway <ns/name>', 'which istio-waypoint Gateway this waypoint is (with --cluster default $POD_NAMESPACE/$SERVICE_ACCOUNT)')
    .addOption(new Option('--token-file <file>', `with --cluster: projected service-account token, audience istio-ca (default ${DEFAULT_TOKEN_FILE})`).conflicts('mesh'))
    .addOption(new Option('--root-cert <file>', `with --cluster: istiod's root certificate (default ${DEFAULT_ROOT_CERT_FILE})`).conflicts('mesh'))
    .option('--hbone <addr>', 'HBONE listen address (default 0.0.0.0:15008)')
    .option('--admin <addr>', 'admin listen address (default 127.0.0.1:15020)')
    .option('--readiness <addr>', 'readiness listen address (default 0.0.0.0:15021; "" disables)')
    .option('--pid-file <file>', "write the waypoint's PID here once it is listening (removed on exit)")
    .addOption(new Option('--drain-delay <time>', 'on SIGTERM: readiness false at once, new tunnels still accepted this long (drain.delayMs, default 5s)').argParser(durationFlag))
    .addOption(new Option('--drain-timeout <time>', 'then GOAWAY: in-flight requests and tunnels get this long (drain.timeoutMs, default 5s)').argParser(durationFlag))
    .addOption(
      new Option(
        '--concurrency <n>',
        `with --mesh: worker processes sharing the HBONE listener (default: the cgroup CPU quota, else the cores: ${defaultConcurrency()} here; 1 runs the waypoint in this one process)`,
      ).conflicts('cluster'),
    )
    .action(async (o: RunOptions) => {
      const flags: ListenFlag[] = [];
      for (const [flag, value] of [['--hbone', o.hbone], ['--admin', o.admin], ['--readiness', o.readiness]] as const) {
        if (value === undefined) continue;
        checkListenFlag(flag, value, flag === '--readiness');
        flags.push({ flag, value });
      }
      const bootstrap = overrideBootstrap(loadBootstrap(o.config), {
        listeners: { hbone: o.hbone, admin: o.admin, readiness: o.readiness },
        drain: { delayMs: o.drainDelay, timeoutMs: o.drainTimeout },
      });
      const cluster = o.cluster ? clusterSettingsFromEnv({ tokenFile: o.tokenFile, rootCert: o.rootCert, gateway: o.gateway }) : undefined;
      // Several workers (src/workers) serve the HBONE connections this process, the primary, accepts.
      // In a cluster one process for now: workers would each need istiod's and the API server's state.
      const concurrency = cluster ? 1 : o.concurrency === undefined ? defaultConcurrency() : parseConcurrency(o.concurrency);
      const file = { bootstrap, meshFile: o.mesh!, meshConfigFile: o.meshConfig, gateway: o.gateway, caDir: o.caDir, configFile: o.config };
      // In a cluster the start waits for istiod and the API server: a SIGTERM meanwhile stops it.
      const abort = new AbortController();
      let started: Waypoint | WaypointWorkers | undefined;
      const starting = namingListenFlags<Waypoint | WaypointWorkers>(flags, () =>
        cluster
          ? Waypoint.start({ bootstrap, cluster, configFile: o.config, signal: abort.signal })
          : concurrency > 1
            ? WaypointWorkers.start({ ...file, concurrency })
            : Waypoint.start({ ...file, signal: abort.signal }),
      );
      onTerminate(async () => {
        abort.abort(new Error('terminated before the waypoint was ready'));
        await starting.catch(() => undefined);
        await started?.shutdown();
      });
      try {
        started = await starting;
      } catch (err) {
        // Stopped by a signal while waiting: onTerminate exits 0 once the start has cleaned up.
        if (abort.signal.aborted) return new Promise<void>(() => {});
        throw err;
      }
      const wp = started;
      const w = wp.mesh.current.waypoint;
      process.stdout.write(
        `waypoint ${w.namespace}/${w.name} (${w.identity})\n` +
          describeOrigin(wp.origin) +
          `  HBONE:     ${addr(wp.addresses.hbone)}\n` +
          `  admin:     http://${addr(wp.addresses.admin)}/\n` +
          (wp.addresses.readiness ? `  readiness: http://${addr(wp.addresses.readiness)}/healthz/ready\n` : ''),
      );
      // SIGHUP re-reads the mesh file now (it is also watched), or recompiles the cluster mesh, as
      // daemons conventionally do, and imports WaypointFilter modules whose code changed (Waypoint.reload).
      process.on('SIGHUP', () => void wp.reload());
      if (o.pidFile) writePidFile(o.pidFile);
    });
}

/** The start-up summary's lines about the sources. */
function describeOrigin(o: SourceOrigin): string {
  if (o.mode === 'file') return `  mesh:      ${o.meshFile}\n  CA:        ${o.caDir}${o.caCreated ? ' (created)' : ''}\n`;
  const xds = o.discoveryAddress === o.caAddress ? '' : `, discovery ${o.discoveryAddress}`;
  return `  istiod:    CA ${o.caAddress}${xds} (root ${o.rootCertFile})\n  kube API:  ${o.apiServer}\n`;
}
