/**
 * A client's end that arrives before the waypoint relays (with the CONNECT's HEADERS, or with its
 * first bytes, while a TCP port's upstream is still being dialed or an undeclared port is still
 * being sniffed) is an end like any other: it reaches the application, which answers and closes,
 * and the tunnel ends. It used to be lost, so the tunnel and the upstream connection stayed open
 * until the client gave up. Addresses: 127.0.236.x (declared TCP port), 127.0.237.x (undeclared).
 */
import net from 'node:net';
import type { ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { hboneSession, type ClientIdentity } from '../../helpers/hbone-client.ts';
import { identityFrom } from '../../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';

/** What the client received and whether the tunnel ended cleanly (`open` when still open after 5 s). */
function earlyEnd(session: ClientHttp2Session, authority: string, payload: string | undefined): Promise<{ got: string; ended: boolean; open?: true }> {
  return new Promise((resolve) => {
    const stream = session.request({ ':method': 'CONNECT', ':authority': authority }, { endStream: payload === undefined });
    if (payload !== undefined) stream.end(payload); // DATA + END_STREAM at once, before the 200
    let got = '';
    let ended = false;
    stream.on('error', () => {});
    stream.on('data', (c: Buffer) => (got += c.toString()));
    stream.once('end', () => (ended = true));
    stream.once('close', () => resolve({ got, ended }));
    setTimeout(() => resolve({ got, ended, open: true }), 5000).unref();
  });
}

for (const { net: n, portName, what } of [
  { net: 236, portName: 'tcp', what: 'declared TCP port (the end comes while the upstream is dialed)' },
  { net: 237, portName: 'foo', what: 'undeclared port (the end comes while the protocol is sniffed)' },
]) {
  describe(what, () => {
    let topo: TestTopology;
    let client: ClientIdentity;
    let session: ClientHttp2Session;
    const apps: net.Server[] = [];

    beforeAll(async () => {
      topo = await startTestTopology(n, { portName, backends: false });
      for (const ip of [`127.0.${n}.11`, `127.0.${n}.12`]) {
        const s = net.createServer({ allowHalfOpen: true }, (sock) => {
          sock.on('data', (c) => sock.write(c.toString().toUpperCase()));
          sock.on('end', () => sock.end('BYE\n'));
          sock.on('error', () => {});
        });
        await new Promise<void>((r) => s.listen(8080, ip, () => r()));
        apps.push(s);
      }
      client = await identityFrom(topo.caDir);
      session = await hboneSession(`127.0.${n}.1`, topo.waypoint!.addresses.hbone.port, client);
    });
    afterAll(async () => {
      session?.destroy();
      for (const s of apps) s.close();
      await topo?.close();
    });

    test('bytes and END_STREAM sent with the CONNECT reach the app; its answer and end come back', async () => {
      expect(await earlyEnd(session, `127.0.${n}.100:80`, 'hello\n')).toEqual({ got: 'HELLO\nBYE\n', ended: true });
    });

    test('END_STREAM on the CONNECT HEADERS reaches the app as a FIN', async () => {
      expect(await earlyEnd(session, `127.0.${n}.100:80`, undefined)).toEqual({ got: 'BYE\n', ended: true });
    });
  });
}
