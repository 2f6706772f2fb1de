/**
 * `waypoint run`: the waypoint itself, standalone, reading mesh state from YAML.
 */
import { Command, Option } from 'commander';
import { Waypoint, addr } from '../app.ts';
import { loadBootstrap, overrideBootstrap } from '../config/index.ts';
import { WaypointWorkers, defaultConcurrency, parseConcurrency } from '../workers/index.ts';
import { REQUIRED, checkListenFlag, durationFlag, namingListenFlags, writePidFile, type ListenFlag } from './flags.ts';
import { onTerminate } from './signals.ts';

interface RunOptions {
  mesh: string;
  config?: string;
  meshConfig?: string;
  caDir?: string;
  gateway?: string;
  hbone?: string;
  admin?: string;
  readiness?: string;
  pidFile?: string;
  drainDelay?: number;
  drainTimeout?: number;
  concurrency?: string;
}

/** The `run` command. Config errors propagate as ConfigError (printed as `file:line: ...`, exit 1). */
export function runCommand(): Command {
  return new Command('run')
    .description('run the waypoint: HBONE listener, filter chain, HBONE upstream')
    .requiredOption('--mesh <file>', `mesh state: multi-document YAML of Namespace, Service, Pod, ServiceEntry, WorkloadEntry, Gateway, istio ConfigMap, policies (watched)${REQUIRED}`)
    .option('--config <file>', 'bootstrap config (waypoint.yaml): listeners, filters, limits, timeouts')
    .option('--mesh-config <file>', 'Istio MeshConfig YAML (overrides the istio ConfigMap in the mesh file)')
    .option('--ca-dir <dir>', 'mesh CA directory with root-cert.pem and root-key.pem (default: the state directory CA, created on first use)')
    .option('--gateway <ns/name>', 'which istio-waypoint Gateway of the mesh file this waypoint is')
    .option('--hbone <addr>', 'HBONE listen address (default 0.0.0.0:15008)')
    .option('--admin <addr>', 'admin listen address (default 127.0.0.1:15020)')
    .option('--readiness <addr>', 'readiness listen address (default 0.0.0.0:15021; "" disables)')
    .option('--pid-file <file>', "write the waypoint's PID here once it is listening (removed on exit)")
    .addOption(new Option('--drain-delay <time>', 'on SIGTERM: readiness false at once, new tunnels still accepted this long (drain.delayMs, default 5s)').argParser(durationFlag))
    .addOption(new Option('--drain-timeout <time>', 'then GOAWAY: in-flight requests and tunnels get this long (drain.timeoutMs, default 5s)').argParser(durationFlag))
    .option('--concurrency <n>', `worker processes sharing the HBONE listener (default: the cgroup CPU quota, else the cores: ${defaultConcurrency()} here; 1 runs the waypoint in this one process)`)
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
      const concurrency = o.concurrency === undefined ? defaultConcurrency() : parseConcurrency(o.concurrency);
      const start = { bootstrap, meshFile: o.mesh, meshConfigFile: o.meshConfig, gateway: o.gateway, caDir: o.caDir, configFile: o.config };
      // Several workers: src/workers runs them under this process (the primary).
      const wp = await namingListenFlags<Waypoint | WaypointWorkers>(flags, () => (concurrency > 1 ? WaypointWorkers.start({ ...start, concurrency }) : Waypoint.start(start)));
      const w = wp.mesh.current.waypoint;
      process.stdout.write(
        `waypoint ${w.namespace}/${w.name} (${w.identity})\n` +
          `  CA:        ${wp.caDir}${wp.caCreated ? ' (created)' : ''}\n` +
          `  HBONE:     ${addr(wp.addresses.hbone)}\n` +
          `  admin:     http://${addr(wp.addresses.admin)}/\n` +
          (wp.addresses.readiness ? `  readiness: http://${addr(wp.addresses.readiness)}/healthz/ready\n` : ''),
      );
      onTerminate(() => wp.shutdown());
      // SIGHUP re-reads the mesh file now (it is also watched), as daemons conventionally do.
      process.on('SIGHUP', () => void wp.mesh.reload());
      if (o.pidFile) writePidFile(o.pidFile);
    });
}
