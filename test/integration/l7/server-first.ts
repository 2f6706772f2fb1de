/**
 * Backends of the L7 sniffing tests (test/integration/l7): a server-first protocol (the server
 * speaks before the client, as MySQL or SMTP do) and the client side of its exchange.
 */
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { track } from '../../helpers/servers.ts';

/**
 * A server-first backend (MySQL/SMTP style): writes an ~80-byte greeting on accept, then answers
 * the client's first line with `reply:<line>` and closes.
 */
export function serverFirst(): { server: net.Server; sockets: Set<net.Socket>; greeting: string } {
  const greeting = `220 server-first.example ESMTP ready ${'x'.repeat(40)}\r\n`;
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.write(greeting);
    let acc = '';
    s.on('data', (c: Buffer) => {
      acc += c.toString();
      const eol = acc.indexOf('\n');
      if (eol >= 0) s.end(`reply:${acc.slice(0, eol).trim()}\r\n`);
    });
  });
  return { server, sockets: track(server), greeting };
}

/**
 * Drive the G1 exchange on `socket` (a plain TCP connection or a CONNECT stream): wait for the
 * greeting without sending anything, reply, then read until the end. Resolves with what was seen.
 */
export function serverFirstExchange(socket: Duplex, greetingLength: number): Promise<{ greeting: string; rest: string; ended: boolean }> {
  return new Promise((resolve, reject) => {
    let acc = '';
    let greeting: string | undefined;
    socket.on('data', (c: Buffer) => {
      acc += c.toString();
      if (greeting === undefined && acc.length >= greetingLength) {
        greeting = acc.slice(0, greetingLength);
        acc = acc.slice(greetingLength);
        socket.write('HELO client\r\n');
      }
    });
    socket.once('end', () => resolve({ greeting: greeting ?? '', rest: acc, ended: true }));
    socket.once('error', reject);
  });
}
