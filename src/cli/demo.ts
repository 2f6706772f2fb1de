/**
 * `waypoint demo` (`npm start`): a whole ambient path on loopback with an embedded mesh, and the
 * one curl command to try.
 */
import path from 'node:path';
import { Command } from 'commander';
import { addr } from '../app.ts';
import { defaultStateDir } from '../identity/index.ts';
import { startTopology, type TopologyOptions } from '../demo/index.ts';
import { checkListenFlag, namingListenFlags, writePidFile } from './flags.ts';
import { onTerminate } from './signals.ts';

/** The demo's topology for the command's options: fixed 127.0.10.x addresses, the access log on (`--access-log`). */
export function demoTopology(o: { dir: string; listen: string; admin: string; accessLog: string }): TopologyOptions {
  return {
    dir: o.dir,
    waypointIp: '127.0.10.1',
    vip: '127.0.10.100',
    podIps: ['127.0.10.11', '127.0.10.12'],
    clientIp: '127.0.10.50',
    tunnelListen: o.listen,
    admin: o.admin,
    readiness: '127.0.10.1:15021',
    accessLogFile: o.accessLog,
  };
}

/** The `demo` command: starts a loopback topology (src/demo/topology.ts) and prints the curl to try. */
export function demoCommand(): Command {
  return new Command('demo')
    .description('run a demo mesh on loopback: tunnel 127.0.0.1:15001 -> waypoint -> two echo endpoints behind inbound roles')
    .option('--dir <dir>', 'where the demo keeps its CA, certificates and mesh.yaml', path.join(defaultStateDir(), 'demo'))
    .option('--listen <addr>', 'plain TCP entry (the tunnel role)', '127.0.0.1:15001')
    .option('--admin <addr>', 'waypoint admin address', '127.0.0.1:15020')
    .option('--access-log <file>', 'MeshConfig accessLogFile of the demo mesh ("" turns the access log off)', '/dev/stdout')
    .option('--pid-file <file>', "write this process's PID here once everything is listening (removed on exit)")
    .action(async (o: { dir: string; listen: string; admin: string; accessLog: string; pidFile?: string }) => {
      checkListenFlag('--listen', o.listen);
      checkListenFlag('--admin', o.admin);
      const flags = [{ flag: '--listen', value: o.listen }, { flag: '--admin', value: o.admin }];
      const topo = await namingListenFlags(flags, () => startTopology(demoTopology(o))).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'EADDRINUSE') throw new Error(`${err.message}: is a demo already running? Stop it first (Ctrl-C in its terminal).`);
        throw err;
      });
      const wp = topo.waypoint!;
      const tunnel = topo.tunnel!;
      process.stdout.write(
        `\nnode-waypoint demo is running (Ctrl-C to stop)\n\n` +
          `  client  -> tunnel ${addr(tunnel.address)} (source ztunnel role, client pod 127.0.10.50)\n` +
          `          -> waypoint ${addr(wp.addresses.hbone)} (${wp.mesh.current.waypoint.identity})\n` +
          `          -> echo.demo.svc.cluster.local (VIP 127.0.10.100:80) -> inbound 127.0.10.11:15008 | 127.0.10.12:15008 -> echo pods :8080\n\n` +
          `  mesh:   ${topo.meshFile} (edit it: changes apply live)\n` +
          `  CA:     ${topo.caDir}\n` +
          `  admin:  http://${addr(wp.addresses.admin)}/ (lists /config_dump, /stats/prometheus, /healthz/ready)\n` +
          `  access log: ${o.accessLog || 'off'} (MeshConfig accessLogFile in the mesh file)\n\n` +
          `Try:\n\n  curl -s http://${addr(tunnel.address)}/hello\n\n`,
      );
      onTerminate(() => topo.close());
      // SIGHUP re-reads the mesh file now, as for `run` (Node's default would end the demo).
      process.on('SIGHUP', () => void wp.mesh.reload().then(() => topo.roleMesh.reload()));
      if (o.pidFile) writePidFile(o.pidFile);
    });
}
