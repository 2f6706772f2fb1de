/**
 * `waypoint tunnel` and `waypoint inbound`: the source and destination ztunnel roles.
 */
import { Command } from 'commander';
import { WorkloadCertificate } from '../identity/index.ts';
import { INBOUND_PARTS, InboundRole, TunnelRole } from '../ztunnel/index.ts';
import { MeshStore } from '../state/index.ts';
import { addr } from '../app.ts';
import { REQUIRED, checkListenFlag, checkTrustRoot, namingListenFlags, writePidFile } from './flags.ts';
import { onTerminate } from './signals.ts';

/** The `tunnel` command (source ztunnel role); exits 1 with a message on bad flags or files. */
export function tunnelCommand(): Command {
  return new Command('tunnel')
    .description("the source ztunnel's outbound role: accept plain TCP and carry each connection in an HBONE CONNECT")
    .requiredOption('--listen <addr>', `plain TCP listen address, e.g. 127.0.0.1:15001${REQUIRED}`)
    .requiredOption('--to <addr>', `HBONE server (waypoint) address, e.g. 127.0.10.1:15008${REQUIRED}`)
    .requiredOption('--authority <vip:port>', `CONNECT :authority, e.g. the service VIP:port${REQUIRED}`)
    .requiredOption('--identity <prefix>', `workload certificate prefix (PREFIX-cert.pem, PREFIX-key.pem)${REQUIRED}`)
    .requiredOption('--ca <file>', `mesh root certificate (root-cert.pem)${REQUIRED}`)
    .option('--expect-san <uri>', 'SPIFFE identity the server must present (default: any of the trust domain)')
    .option('--bind <ip>', 'source IP for the HBONE connection (stands in for the client pod IP)')
    .option('--mesh <file>', 'mesh YAML: describe the workload owning --bind in the baggage header')
    .option('--pid-file <file>', "write this process's PID here once it is listening (removed on exit)")
    .action(async (o: { listen: string; to: string; authority: string; identity: string; ca: string; expectSan?: string; bind?: string; mesh?: string; pidFile?: string }) => {
      checkListenFlag('--listen', o.listen);
      await checkTrustRoot(o.ca);
      const certificate = await WorkloadCertificate.fromPrefix(o.identity, o.ca);
      const mesh = o.mesh ? await MeshStore.open({ meshFile: o.mesh, watch: true }) : undefined;
      const role = await namingListenFlags([{ flag: '--listen', value: o.listen }], () =>
        TunnelRole.start({ listen: o.listen, to: o.to, authority: o.authority, certificate, expectSan: o.expectSan, bind: o.bind, mesh }),
      );
      process.on('SIGHUP', () => void mesh?.reload());
      process.stdout.write(`tunnel: ${addr(role.address)} -> HBONE ${o.to} (:authority ${o.authority})\n`);
      onTerminate(async () => {
        await role.close();
        mesh?.close();
      });
      if (o.pidFile) writePidFile(o.pidFile);
    });
}

/** The `inbound` command (destination ztunnel role); exits 1 with a message on bad flags or files. */
export function inboundCommand(): Command {
  return new Command('inbound')
    .description("the destination ztunnel's inbound role: terminate HBONE and dial the local application")
    .requiredOption('--listen <ip:port>', `HBONE listen address, e.g. 127.0.10.11:15008 (the pod IP)${REQUIRED}`)
    .requiredOption('--identity <prefix>', `workload certificate prefix (PREFIX-cert.pem, PREFIX-key.pem)${REQUIRED}`)
    .requiredOption('--ca <file>', `mesh root certificate (root-cert.pem)${REQUIRED}`)
    .option('--forward <host>', 'host to dial for the application (default: the listen IP)')
    .option(
      '--mesh <file>',
      "mesh YAML: the workload owning the listen IP (CONNECT response baggage), its PeerAuthentication for --plaintext, and its selector / namespace / mesh-wide AuthorizationPolicies (ztunnel's L4 semantics: denied CONNECTs get 401)",
    )
    .option(
      '--plaintext <ip:port>',
      "plain-TCP listener for the app's non-mesh clients, relayed to <forward host>:<same port> unless PeerAuthentication is STRICT there (repeatable)",
      (v: string, prev: string[] = []) => [...prev, v],
    )
    .option('--pid-file <file>', "write this process's PID here once it is listening (removed on exit)")
    .action(async (o: { listen: string; identity: string; ca: string; forward?: string; mesh?: string; plaintext?: string[]; pidFile?: string }) => {
      const flags = [{ flag: '--listen', value: o.listen }, ...(o.plaintext ?? []).map((value) => ({ flag: '--plaintext', value }))];
      for (const f of flags) checkListenFlag(f.flag, f.value);
      await checkTrustRoot(o.ca);
      const certificate = await WorkloadCertificate.fromPrefix(o.identity, o.ca);
      // An invalid AuthorizationPolicy (or PeerAuthentication) stops the start, and refuses a reload
      // (the last good policies stay). The destination ztunnel is no waypoint: the file needs no waypoint Gateway.
      const mesh = o.mesh ? await MeshStore.open({ meshFile: o.mesh, withoutWaypoint: true, watch: true, parts: INBOUND_PARTS }) : undefined;
      const role = await namingListenFlags(flags, () => InboundRole.start({ listen: o.listen, certificate, forward: o.forward, mesh, plaintext: o.plaintext }));
      process.on('SIGHUP', () => void mesh?.reload());
      process.stdout.write(`inbound: HBONE ${addr(role.address)} -> ${o.forward ?? role.address.address}:<authority port>\n`);
      for (const p of role.plaintextAddresses) process.stdout.write(`inbound: plaintext ${addr(p)} -> ${o.forward ?? role.address.address}:${p.port}\n`);
      onTerminate(async () => {
        await role.close();
        mesh?.close();
      });
      if (o.pidFile) writePidFile(o.pidFile);
    });
}

