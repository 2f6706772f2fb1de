/**
 * Backends and a client for the DestinationRule integration tests: pods that answer with their
 * own IP (`{"host": ip}`), `/flaky` answering 500 on pods in a `failing` set, `?ms=` delaying the
 * answer; a plain HTTP/1.1 client through a tunnel entry that reads the answering pod back.
 */
import http from 'node:http';
import { startBackend } from '../../helpers/recorder.ts';

export type Entry = { host: string; port: number };

export interface Reply {
  status: number;
  /** The pod that answered ('' for a local reply). */
  host: string;
  setCookie: string[] | undefined;
  body: string;
}

/** An HTTP pod on `ip:8080`; `onConnection` sees each accepted connection; its closer goes to `closers`. */
export async function httpBackend(ip: string, failing: ReadonlySet<string>, closers: (() => Promise<unknown>)[], onConnection?: () => void): Promise<void> {
  const b = await startBackend(ip, 8080, (r) => {
    const url = new URL(r.url, 'http://x');
    return { status: url.pathname === '/flaky' && failing.has(ip) ? 500 : 200, body: { host: ip }, delayMs: Number(url.searchParams.get('ms') ?? 0) };
  });
  if (onConnection) b.server.on('connection', onConnection);
  closers.push(b.close);
}

/** One GET through `entry`. */
export function send(entry: Entry, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: entry.host, port: entry.port, path, headers: { host: 'svc.demo', ...headers }, agent: false }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => {
        let host = '';
        try {
          host = (JSON.parse(b) as { host: string }).host;
        } catch {
          // a local reply
        }
        resolve({ status: res.statusCode!, host, setCookie: res.headers['set-cookie'], body: b });
      });
    });
    req.on('error', reject);
    req.end();
  });
}
