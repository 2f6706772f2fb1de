/**
 * The admin server (Istio's 15020 / Envoy admin, reduced): `/` (the list of what it serves, as
 * Envoy's admin home page), `/healthz/ready`, `/healthz/live`, `/stats/prometheus`, `/config_dump`.
 * Also used, with only the two health checks, as the status server on 15021. Handlers are cheap and never touch the
 * data path.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { listenOn } from '../util/index.ts';

/** What the admin server serves; fields left out are not served (the readiness server has only `ready`). */
export interface AdminHandlers {
  /** True when the proxy is ready to take traffic (false while starting and while draining). */
  ready(): boolean;
  /** Why it is not ready, the body of a 503 on `/healthz/ready` (default `draining`). */
  notReady?(): string;
  /** Registry to serve at /stats/prometheus; omitted on the readiness server. */
  readonly metrics?: Registry;
  /** JSON for /config_dump (or a promise of it); omitted on the readiness server. */
  configDump?(): unknown;
}

/** The endpoints a server with handlers `h` serves, with one line saying what each is. */
function endpoints(h: AdminHandlers): [string, string][] {
  const list: [string, string][] = [];
  if (h.configDump) list.push(['/config_dump', 'bootstrap config, mesh state, certificate, listeners and routing in force (JSON)']);
  if (h.metrics) list.push(['/stats/prometheus', 'metrics: process and istio_* (Prometheus text format)']);
  list.push(['/healthz/ready', '200 when ready for traffic, 503 while starting (saying what it waits for) and while draining']);
  list.push(['/healthz/live', '200 while the process serves (liveness: never fails for istiod or the API server being away)']);
  return list;
}

/**
 * An admin or readiness HTTP server. GET/HEAD only (405 otherwise), `/` lists the endpoints, 404
 * for unknown paths, 503 on `/healthz/ready` while draining (or not yet ready), 200 on `/healthz/live`.
 */
export class AdminServer {
  readonly server: http.Server;

  constructor(h: AdminHandlers) {
    const list = endpoints(h);
    const width = Math.max(...list.map(([p]) => p.length));
    const index = `node-waypoint admin\n\n${list.map(([p, what]) => `  ${p.padEnd(width)}  ${what}\n`).join('')}`;
    this.server = http.createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'method not allowed\n');
      if (path === '/healthz/ready') return h.ready() ? send(res, 200, 'text/plain', '') : send(res, 503, 'text/plain; charset=utf-8', `${h.notReady?.() ?? 'draining'}\n`);
      // Answering at all is the check: a stuck event loop does not.
      if (path === '/healthz/live') return send(res, 200, 'text/plain', '');
      if (path === '/stats/prometheus' && h.metrics) {
        const metrics = h.metrics;
        metrics.metrics().then(
          (text) => send(res, 200, metrics.contentType, text),
          (err: Error) => send(res, 500, 'text/plain', `${err.message}\n`),
        );
        return;
      }
      if (path === '/') return send(res, 200, 'text/plain; charset=utf-8', index);
      if (path === '/config_dump' && h.configDump) {
        const dump = h.configDump;
        // A waypoint with workers gets the dump from one of them (src/workers).
        Promise.resolve()
          .then(() => dump())
          .then(
            (d) => send(res, 200, 'application/json', `${JSON.stringify(d, null, 2)}\n`),
            (err: Error) => send(res, 500, 'text/plain', `${err.message}\n`),
          );
        return;
      }
      send(res, 404, 'text/plain', 'not found\n');
    });
    this.server.keepAliveTimeout = 5_000;
  }

  /** Listen on `ip:port`; resolves with the bound address. */
  listen(hostPort: string): Promise<AddressInfo> {
    return listenOn(this.server, hostPort);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

function send(res: http.ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
