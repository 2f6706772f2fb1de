/**
 * The floor of HTTP/2 inside HBONE on Node: a bare inner-h2c relay with no filters, no router, no
 * telemetry, standing in for the waypoint of the bench's `http` topology, so `npm run bench`
 * measures it with the same load, tunnels and backends as the waypoint:
 *
 *   BENCH_WAYPOINT_SCRIPT=bench/micro/h2c-floor-relay.ts npm run bench -- --only tunnels,grpc
 *
 * The `waypoint` rows are then this relay (the HTTP/1.1 rows read `skipped`: it serves only the
 * `http2`/`grpc` Services). What it does per tunnel and per request is the least Node's http2 needs:
 *
 *  - HBONE in: `http2.createSecureServer` (TLS 1.3, mTLS, the waypoint's default HTTP/2 settings);
 *    a CONNECT to a Service VIP is answered 200 and its stream handed to an inner h2c server
 *    (`emit('connection')`: Node wraps the stream in its JS stream socket, as for the waypoint);
 *  - each inner stream (core `stream` API, no compatibility layer): its headers, minus the
 *    pseudo-headers and connection-specific ones, go upstream on a pooled h2c session that runs
 *    over one HBONE CONNECT stream to the pod's inbound role (`podIp:15008`); bodies are piped both
 *    ways and trailers relayed.
 *
 * `H2C_FLOOR_API=compat` serves the inner requests through Node's compatibility API instead (what
 * the waypoint's inner server does), to measure what that layer costs; `H2C_FLOOR_INNER=native`
 * runs both inner sessions on the CONNECT streams' native handles (h2c-native.ts: it can abort Node).
 *
 * Takes the waypoint's arguments (`run --mesh F --ca-dir D --config C`); reads the HBONE and admin
 * listeners from the config, the Services from bench/e2e/config.ts; answers `/healthz/ready` on the
 * admin listener. Identity: the waypoint's (`spiffe://cluster.local/ns/demo/sa/waypoint`).
 */
import fs from 'node:fs';
import type { EventEmitter } from 'node:events';
import http from 'node:http';
import http2, { type ClientHttp2Session, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { Readable } from 'node:stream';
import { parse } from 'yaml';
import { LocalCa } from '../../src/identity/ca.ts';
import { WorkloadCertificate } from '../../src/identity/workload-certificate.ts';
import { DEFAULT_HTTP2, http2Settings, joinWritev } from '../../src/hbone/index.ts';
import { hboneTlsOptions } from '../../src/hbone/settings.ts';
import { BACKEND_KINDS, BACKEND_PORTS, TOPOLOGIES } from '../e2e/config.ts';
import { attachNative, connectNative } from './h2c-native.ts';

const NATIVE = process.env.H2C_FLOOR_INNER === 'native';

const argv = process.argv.slice(2);
const arg = (name: string): string => {
  const i = argv.indexOf(name);
  if (i < 0 || !argv[i + 1]) throw new Error(`h2c-floor-relay: ${name} is required (the waypoint's run arguments)`);
  return argv[i + 1];
};
const config = parse(fs.readFileSync(arg('--config'), 'utf8')) as { listeners: { hbone: string; admin: string }; upstream?: { hbonePort?: number } };
const [hboneHost, hbonePort] = splitHostPort(config.listeners.hbone);
const [adminHost, adminPort] = splitHostPort(config.listeners.admin);
const upstreamHbonePort = config.upstream?.hbonePort ?? 15008;
const spec = TOPOLOGIES.find((t) => t.options.waypointIp === hboneHost);
if (!spec) throw new Error(`h2c-floor-relay: no bench topology has waypoint IP ${hboneHost}`);
/** `vip:80` of the h2c and gRPC Services → the pod's backend `ip:port`. */
const services = new Map<string, { ip: string; port: number }>();
for (const kind of BACKEND_KINDS) if (kind !== 'h1') services.set(`${spec.bench[kind].vip}:80`, { ip: spec.options.podIps[0], port: BACKEND_PORTS[kind] });

function splitHostPort(hp: string): [string, number] {
  const i = hp.lastIndexOf(':');
  return [hp.slice(0, i), Number(hp.slice(i + 1))];
}

const ca = await LocalCa.load(arg('--ca-dir'));
const cert = await WorkloadCertificate.start(ca, 'spiffe://cluster.local/ns/demo/sa/waypoint', 24 * 3600_000);
const tls = hboneTlsOptions(cert.current);
const p = DEFAULT_HTTP2;

// --- upstream: one HBONE connection per pod, one h2c session per backend over a CONNECT stream ---

const hbone = new Map<string, ClientHttp2Session>();
const h2c = new Map<string, Promise<ClientHttp2Session>>();

function hboneTo(ip: string): ClientHttp2Session {
  let s = hbone.get(ip);
  if (s && !s.closed && !s.destroyed) return s;
  s = http2.connect(`https://${ip}:${upstreamHbonePort}`, { ...tls, checkServerIdentity: () => undefined, settings: http2Settings(p, false) });
  s.on('error', () => {});
  s.once('close', () => hbone.delete(ip));
  s.once('connect', (session: ClientHttp2Session) => session.setLocalWindowSize(p.initialConnectionWindowSize));
  hbone.set(ip, s);
  return s;
}

function h2cTo(ip: string, port: number): Promise<ClientHttp2Session> {
  const key = `${ip}:${port}`;
  let s = h2c.get(key);
  if (s) return s;
  s = new Promise<ClientHttp2Session>((resolve, reject) => {
    const tunnel = hboneTo(ip).request({ ':method': 'CONNECT', ':authority': key });
    tunnel.on('error', reject);
    tunnel.once('response', (h: IncomingHttpHeaders) => {
      if (Number(h[':status']) !== 200) return reject(new Error(`CONNECT ${key}: ${h[':status']}`));
      const opts = { settings: http2Settings(p, false) };
      const session = (NATIVE && connectNative(tunnel, `http://${key}`, opts)) || http2.connect(`http://${key}`, { ...opts, createConnection: () => joinWritev(tunnel) });
      session.on('error', () => {});
      session.once('close', () => h2c.delete(key));
      session.once('connect', () => resolve(session));
    });
  });
  s.catch(() => h2c.delete(key));
  h2c.set(key, s);
  return s;
}

// --- inner h2c: one server, fed each tunnel ---

const inner = http2.createServer({ settings: { ...http2Settings(p, true), maxHeaderListSize: 60 * 1024 }, maxSessionMemory: p.maxSessionMemoryMb });
inner.on('session', (s) => s.on('error', () => {}));
type Target = { ip: string; port: number };
const targetOf = (session: http2.Http2Session | undefined): Target | undefined => (session as (http2.ServerHttp2Session & { target?: Target }) | undefined)?.target;

/** The request's headers for the upstream: pseudo-headers kept (`:scheme` http), connection-specific ones dropped. */
function upstreamHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    if (name === 'connection' || name === 'keep-alive' || name === 'transfer-encoding' || name === 'upgrade' || name === 'proxy-connection') continue;
    out[name] = headers[name];
  }
  out[':scheme'] = 'http';
  return out;
}

function responseHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in h) if (name !== 'connection' && name !== 'keep-alive' && name !== 'transfer-encoding') out[name] = h[name];
  return out;
}

/** The downstream side of one exchange, as the two APIs below offer it. */
interface Downstream {
  readonly body: Readable;
  readonly gone: () => boolean;
  readonly closed: EventEmitter;
  destroy(): void;
  respond(h: IncomingHttpHeaders, trailers: () => IncomingHttpHeaders | undefined, up: Readable): void;
  fail(): void;
}

/** Send the request upstream on the pooled h2c session to `target`; the answer goes to `down`. */
function forward(target: Target, out: OutgoingHttpHeaders, endStream: boolean, down: Downstream): void {
  h2cTo(target.ip, target.port).then(
    (session) => {
      if (down.gone()) return;
      const up = session.request(out, { endStream });
      up.on('error', () => down.destroy());
      down.closed.once('close', () => {
        if (!up.destroyed) up.close(http2.constants.NGHTTP2_CANCEL);
      });
      if (!endStream) down.body.pipe(up);
      let trailers: IncomingHttpHeaders | undefined;
      up.once('trailers', (t: IncomingHttpHeaders) => (trailers = t));
      up.once('response', (h: IncomingHttpHeaders) => {
        if (!down.gone()) down.respond(h, () => trailers, up);
      });
    },
    () => down.fail(),
  );
}

if (process.env.H2C_FLOOR_API === 'compat') {
  // Node's compatibility API (Http2ServerRequest/Response per request), as the waypoint serves h2c.
  inner.on('request', (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    const target = targetOf(req.stream.session);
    if (!target) return req.stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    forward(target, upstreamHeaders(req.headers), req.stream.endAfterHeaders, {
      body: req,
      gone: () => res.destroyed,
      closed: res,
      destroy: () => res.destroy(),
      respond: (h, trailers, up) => {
        const rh = responseHeaders(h);
        const status = Number(rh[':status']);
        delete rh[':status'];
        res.writeHead(status, rh);
        // Trailers arrive before the upstream's end, so before the response ends.
        up.once('end', () => {
          const t = trailers();
          if (t) res.addTrailers(t as OutgoingHttpHeaders);
        });
        up.pipe(res);
      },
      fail: () => res.writeHead(503).end(),
    });
  });
} else {
  // Node's core API: the stream and its header object.
  inner.on('stream', (down: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    down.on('error', () => {});
    const target = targetOf(down.session);
    if (!target) return down.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    forward(target, upstreamHeaders(headers), down.endAfterHeaders, {
      body: down,
      gone: () => down.destroyed,
      closed: down,
      destroy: () => down.destroy(),
      respond: (h, trailers, up) => {
        down.respond(responseHeaders(h), { waitForTrailers: true });
        down.once('wantTrailers', () => down.sendTrailers((trailers() ?? {}) as OutgoingHttpHeaders));
        up.pipe(down);
      },
      fail: () => {
        if (!down.destroyed) down.respond({ ':status': 503 }, { endStream: true });
      },
    });
  });
}

// --- HBONE in ---

const outer = http2.createSecureServer({ ...tls, requestCert: true, rejectUnauthorized: true, settings: http2Settings(p, true), maxSessionMemory: p.maxSessionMemoryMb });
outer.on('session', (s) => {
  s.on('error', () => {});
  s.once('connect', () => s.setLocalWindowSize(p.initialConnectionWindowSize));
});
// The inner session of a tunnel is created synchronously by `emit('connection')`: tag it there.
let attaching: Target | undefined;
inner.prependListener('session', (s) => {
  (s as http2.ServerHttp2Session & { target?: Target }).target = attaching;
});
outer.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
  stream.on('error', () => {});
  const target = headers[':method'] === 'CONNECT' ? services.get(String(headers[':authority'])) : undefined;
  if (!target) {
    stream.respond({ ':status': 404 }, { endStream: true });
    return;
  }
  stream.respond({ ':status': 200 });
  attaching = target;
  try {
    // H2C_FLOOR_INNER=native: the inner session on the CONNECT stream's native handle (h2c-native.ts).
    if (!(NATIVE && attachNative(inner, stream))) inner.emit('connection', joinWritev(stream));
  } finally {
    attaching = undefined;
  }
});
await new Promise<void>((r) => outer.listen(hbonePort, hboneHost, r));

const admin = http.createServer((req, res) => {
  res.writeHead(req.url === '/healthz/ready' ? 200 : 404).end();
});
await new Promise<void>((r) => admin.listen(adminPort, adminHost, r));
process.stderr.write(`h2c-floor-relay: HBONE ${hboneHost}:${hbonePort}, admin ${adminHost}:${adminPort}, services ${[...services.keys()].join(', ')}\n`);

const stop = () => {
  for (const s of hbone.values()) s.destroy();
  outer.close();
  admin.close();
  void cert.close();
  setTimeout(() => process.exit(0), 200).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
