/**
 * Small pieces every integration test needs around its own servers: listen on a loopback
 * address, track and hard-close connections, and bounded waits (a hang fails the test; timing
 * decides nothing).
 */
import type http from 'node:http';
import type net from 'node:net';

/** Listen `server` on `ip:port`; resolves with it once bound, rejects on a bind error. */
export function listen<T extends net.Server>(server: T, ip: string, port: number): Promise<T> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, ip, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}

/** The open sockets of `server`, kept current (for a hard close). */
export function track(server: net.Server): Set<net.Socket> {
  const set = new Set<net.Socket>();
  server.on('connection', (s: net.Socket) => {
    set.add(s);
    s.once('close', () => set.delete(s));
  });
  return set;
}

/** Close a server and every connection it has. */
export function closeServer(server: net.Server | http.Server, sockets?: Iterable<net.Socket>): Promise<void> {
  if (sockets) for (const s of sockets) s.destroy();
  if ('closeAllConnections' in server) server.closeAllConnections();
  return new Promise((r) => server.close(() => r()));
}

/** Resolve after `ms`. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Wait until `pick()` returns something other than undefined; fails after `timeoutMs` naming `what`. */
export async function eventually<T>(pick: () => T | undefined, what: string, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = pick();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Reject after `ms` with `what` (bounds a hang; never a speed assertion). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms (hang)`)), ms);
    }),
  ]);
}
