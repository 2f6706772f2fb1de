/**
 * Binding servers to `ADDR:PORT` listen addresses (the form every `--listen`, `--hbone` and
 * `--admin` flag and bootstrap listener takes).
 */
import type { AddressInfo, Server } from 'node:net';

/** Parse `ip:port`, `[v6]:port` or `host:port`. Throws with a clear message otherwise. */
export function parseListenAddress(hostPort: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(hostPort);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new Error(`invalid listen address "${hostPort}": expected IP:PORT or [IPv6]:PORT`);
  return { host: m[1] ?? m[2], port };
}

/**
 * Listen on `hostPort`; resolves with the bound address (port 0 becomes the chosen port).
 * Rejects with the bind error (EADDRINUSE, EADDRNOTAVAIL) or a parse error. `[::]` is a
 * dual-stack socket (IPv4 too); where the host has no IPv6 it becomes `0.0.0.0`, as Node's own
 * `listen(port)` without a host does (nodejs.org/api/net.html `server.listen`).
 */
export async function listenOn(server: Server, hostPort: string): Promise<AddressInfo> {
  const { host, port } = parseListenAddress(hostPort);
  try {
    return await bind(server, port, host);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (host !== '::' || (code !== 'EAFNOSUPPORT' && code !== 'EADDRNOTAVAIL')) throw err;
    return bind(server, port, '0.0.0.0');
  }
}

function bind(server: Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}
