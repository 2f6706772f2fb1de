/**
 * Interop with an HTTP/2 stack that is not Node's: Debian's python3-h2 (installed by .ci/run)
 * acts as the source ztunnel and opens HBONE CONNECTs to the waypoint. Addresses: 127.0.25.x.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { parseHttpResponse } from '../helpers/hbone-client.ts';
import { identityFrom, spiffe } from '../helpers/identity.ts';
import { startTestTopology, type TestTopology } from '../helpers/topology.ts';

const run = promisify(execFile);
// Debian's python3 (which sees python3-h2), not whichever python3 is first on PATH.
const PYTHON = '/usr/bin/python3';
const SCRIPT = path.join(import.meta.dirname, 'h2_hbone_client.py');

let topo: TestTopology;
let prefix: string;

beforeAll(async () => {
  topo = await startTestTopology(25);
  const leaf = await identityFrom(topo.caDir, spiffe('demo', 'python'));
  prefix = path.join(topo.dir, 'python');
  fs.writeFileSync(`${prefix}-cert.pem`, leaf.certPem);
  fs.writeFileSync(`${prefix}-key.pem`, leaf.keyPem);
});
afterAll(async () => {
  await topo?.close();
});

async function h2client(authority: string, mode: 'get' | 'malformed'): Promise<{ status?: number; reset?: number; body: string }> {
  const { stdout } = await run(
    PYTHON,
    [SCRIPT, '127.0.25.1', String(topo.waypoint!.addresses.hbone.port), `${prefix}-cert.pem`, `${prefix}-key.pem`, path.join(topo.caDir, 'root-cert.pem'), authority, mode],
    { timeout: 15_000 },
  );
  return JSON.parse(stdout.trim().split('\n').pop()!);
}

test('python3-h2 CONNECT → waypoint → endpoint: HTTP/1.1 answered inside the tunnel', async () => {
  const r = await h2client('127.0.25.100:80', 'get');
  expect(r.status).toBe(200);
  const res = parseHttpResponse(Buffer.from(r.body, 'latin1'));
  expect(res.status).toBe(200);
  expect(JSON.parse(res.body.toString()).url).toBe('/python-h2');
});

test('python3-h2 CONNECT to an unknown target gets 503', async () => {
  expect((await h2client('127.0.25.200:80', 'get')).status).toBe(503);
});

test('a malformed CONNECT (with :scheme and :path) is reset by nghttp2 before our code runs', async () => {
  const r = await h2client('127.0.25.100:80', 'malformed');
  // nghttp2 treats it as a malformed request and resets the stream with PROTOCOL_ERROR (1).
  expect(r.status).toBeUndefined();
  expect(r.reset).toBe(1);
});
