/**
 * StreamContext.respond / sendLocalReply over a real node:http exchange on 127.0.30.1, and the
 * Envoy status table of local replies (pipeline/response-flags.ts).
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FilterChain } from '../../../src/pipeline/chain.ts';
import type { StreamContext } from '../../../src/pipeline/context.ts';
import type { Filter } from '../../../src/pipeline/filter.ts';
import { HeaderList } from '../../../src/pipeline/headers.ts';
import { respond, sendLocalReply } from '../../../src/pipeline/local-reply.ts';
import { LOCAL_REPLY_BODY, LOCAL_REPLY_STATUS, ResponseFlag, type ResponseFlagName } from '../../../src/pipeline/response-flags.ts';
import { fakeStream, terminal } from './fakes.ts';

const HOST = '127.0.30.1';
let server: http.Server;
let port: number;
let handler: (req: IncomingMessage, res: ServerResponse) => void = () => undefined;

beforeAll(async () => {
  server = http.createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

interface Reply {
  status: number;
  statusMessage: string;
  rawHeaders: string[];
  headers: http.IncomingHttpHeaders;
  body: string;
  /** The response was cut off (downstream reset). */
  aborted: boolean;
}

/** One request; `serve` runs with a StreamContext over the real req/res and the given chain. */
async function exchange(filters: Filter[], serve: (stream: StreamContext) => void): Promise<{ reply: Reply; stream: StreamContext }> {
  const chain = new FilterChain([...filters, terminal('router', [], [])]);
  let stream: StreamContext | undefined;
  handler = (req, res) => {
    stream = fakeStream(chain, req, res);
    serve(stream);
  };
  const reply = await new Promise<Reply>((resolve, reject) => {
    const req = http.request({ host: HOST, port, path: '/', agent: false }, (res) => {
      const chunks: Buffer[] = [];
      let aborted = false;
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('aborted', () => (aborted = true));
      res.on('error', () => (aborted = true));
      res.on('close', () =>
        resolve({
          status: res.statusCode ?? 0,
          statusMessage: res.statusMessage ?? '',
          rawHeaders: res.rawHeaders,
          headers: res.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          aborted: aborted || !res.complete,
        }),
      );
    });
    req.on('error', reject);
    req.end();
  });
  return { reply, stream: stream! };
}

/** Envoy's status for each local-reply flag (envoy source, Istio waypoint behaviour). */
const ENVOY_STATUS: Record<string, number> = {
  NR: 404,
  UH: 503,
  UF: 503,
  UC: 503,
  UR: 503,
  UO: 503,
  LR: 503,
  UT: 504,
  UPE: 502,
  DPE: 400,
  UAEX: 403,
  SI: 408, // stream idle timeout: "stream timeout"
  OM: 503, // stop_accepting_requests: "envoy overloaded" (conn_manager_impl.cc)
  RL: 429, // local rate limit: "local_rate_limited" (local_ratelimit.cc; status TooManyRequests by default)
};

describe('LOCAL_REPLY_STATUS', () => {
  test('covers exactly the local-reply flags Envoy maps to a status', () => {
    expect(Object.keys(LOCAL_REPLY_STATUS).sort()).toEqual(Object.keys(ENVOY_STATUS).sort());
  });

  test.each(Object.entries(ENVOY_STATUS))('%s maps to %i', (flag, status) => {
    expect(LOCAL_REPLY_STATUS[flag]).toBe(status);
  });

  test('every flag in the table is a known ResponseFlag', () => {
    const known = new Set<string>(Object.values(ResponseFlag));
    for (const flag of Object.keys(LOCAL_REPLY_STATUS)) expect(known.has(flag)).toBe(true);
  });
});

describe('sendLocalReply', () => {
  test.each(Object.entries(ENVOY_STATUS))('flag %s with no explicit status answers %i with the flag body and records the flag', async (flag, status) => {
    const { reply, stream } = await exchange([], (s) => sendLocalReply(s, undefined, undefined, flag as ResponseFlagName, `details_${flag}`));
    const body = LOCAL_REPLY_BODY[flag] ?? '';
    expect(reply.status).toBe(status);
    expect(reply.body).toBe(body);
    expect(reply.headers['content-length']).toBe(String(Buffer.byteLength(body)));
    expect(reply.headers['content-type']).toBe('text/plain');
    expect(stream.responseCode).toBe(status);
    expect(stream.responseFlags).toBe(flag);
    expect(stream.responseCodeDetails).toBe(`details_${flag}`);
  });

  test('an explicit status and body win over the flag mapping; content-length counts bytes', async () => {
    const body = 'dénié ✓';
    const { reply, stream } = await exchange([], (s) => sendLocalReply(s, 429, body, ResponseFlag.UpstreamOverflow, 'overflow'));
    expect(reply.status).toBe(429);
    expect(reply.body).toBe(body);
    expect(reply.headers['content-length']).toBe(String(Buffer.byteLength(body)));
    expect(Buffer.byteLength(body)).toBeGreaterThan(body.length);
    expect(stream.responseCode).toBe(429);
    expect(stream.responseFlags).toBe('UO');
  });

  test('a flag without a mapped status and no explicit status answers 500 with an empty body', async () => {
    const { reply, stream } = await exchange([], (s) => sendLocalReply(s, undefined, undefined, ResponseFlag.DownstreamConnectionTermination, 'x'));
    expect(reply.status).toBe(500);
    expect(reply.body).toBe('');
    expect(reply.headers['content-length']).toBe('0');
    expect(stream.responseFlags).toBe('DC');
  });

  test('the None flag is not recorded', async () => {
    const { reply, stream } = await exchange([], (s) => sendLocalReply(s, 403, 'no', ResponseFlag.None, 'rbac_access_denied'));
    expect(reply.status).toBe(403);
    expect(stream.responseFlags).toBe('-');
    expect(stream.responseCodeDetails).toBe('rbac_access_denied');
  });

  test('flags accumulate comma-joined in the order set', async () => {
    const { stream } = await exchange([], (s) => {
      s.addFlag(ResponseFlag.NoHealthyUpstream);
      s.addFlag(ResponseFlag.None);
      sendLocalReply(s, undefined, undefined, ResponseFlag.UpstreamConnectionFailure, 'd');
    });
    expect(stream.responseFlags).toBe('UH,UF');
  });

  test('response-header filters run in reverse order, see the status and can add headers', async () => {
    const seenCodes: number[] = [];
    const adder = (name: string): Filter => ({
      name,
      onResponseHeaders(stream, headers) {
        seenCodes.push(stream.responseCode);
        headers.append('x-order', name);
      },
    });
    const { reply } = await exchange([adder('first'), adder('second')], (s) => sendLocalReply(s, undefined, undefined, ResponseFlag.NoRouteFound, 'route_not_found'));
    expect(reply.status).toBe(404);
    const order: string[] = [];
    for (let i = 0; i < reply.rawHeaders.length; i += 2) if (reply.rawHeaders[i].toLowerCase() === 'x-order') order.push(reply.rawHeaders[i + 1]);
    expect(order).toEqual(['second', 'first']);
    expect(seenCodes).toEqual([404, 404]);
  });

  test('after the response started it resets the downstream instead of answering', async () => {
    const { reply, stream } = await exchange([], (s) => {
      respond(s, 200, undefined, new HeaderList(['content-length', '100']));
      (s.res as import('node:http').ServerResponse).write('partial');
      setTimeout(() => sendLocalReply(s, undefined, undefined, ResponseFlag.UpstreamRemoteReset, 'upstream_reset_after_response_started'), 20);
    });
    expect(reply.status).toBe(200);
    expect(reply.aborted).toBe(true);
    expect(reply.body).toBe('partial');
    expect(stream.responseCode).toBe(200);
    expect(stream.responseFlags).toBe('UR');
    expect(stream.responseCodeDetails).toBe('upstream_reset_after_response_started');
    expect(stream.res.destroyed).toBe(true);
  });
});

describe('respond', () => {
  test('writes status, reason phrase and headers (case preserved) and returns true', async () => {
    let ok: boolean | undefined;
    const { reply, stream } = await exchange([], (s) => {
      ok = respond(s, 201, 'Made It', new HeaderList(['X-Custom', 'v', 'content-length', '0']));
      s.res.end();
    });
    expect(ok).toBe(true);
    expect(reply.status).toBe(201);
    expect(reply.statusMessage).toBe('Made It');
    expect(reply.rawHeaders).toContain('X-Custom');
    expect(reply.headers['x-custom']).toBe('v');
    expect(stream.responseCode).toBe(201);
  });

  test('after headers were sent it returns false, runs no filters and changes nothing', async () => {
    let runs = 0;
    const counter: Filter = { name: 'count', onResponseHeaders: () => void runs++ };
    let second: boolean | undefined;
    const { reply, stream } = await exchange([counter], (s) => {
      respond(s, 200, undefined, new HeaderList(['content-length', '2']));
      second = respond(s, 502, undefined, new HeaderList(['content-length', '0']));
      s.res.end('ok');
    });
    expect(second).toBe(false);
    expect(runs).toBe(1);
    expect(reply.status).toBe(200);
    expect(reply.body).toBe('ok');
    expect(stream.responseCode).toBe(200);
  });

  test('on a destroyed response it returns false and writes nothing', async () => {
    let ok: boolean | undefined;
    const { reply } = await exchange([], (s) => {
      s.res.destroy();
      ok = respond(s, 200, undefined, new HeaderList());
    }).catch(() => ({ reply: undefined }));
    expect(ok).toBe(false);
    expect(reply?.status ?? 0).not.toBe(200);
  });
});

// Checked by `tsc`: flags are Envoy's names, never free strings (a typo would log an unknown flag).
export function flagsAreTyped(s: StreamContext): void {
  // @ts-expect-error not a response flag
  sendLocalReply(s, 400, '', 'BOGUS', 'x');
  // @ts-expect-error not a response flag
  s.addFlag('nc');
  s.addFlag(ResponseFlag.NoClusterFound);
}
