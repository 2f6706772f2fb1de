/**
 * Cancels never cost an ordinary client its HBONE session, and floods of resets still do, with
 * a reason in the log (python3-h2 as the client, writing each burst in one write):
 * - a client with 100 streams open (a ztunnel's most per connection) that resets them all and
 *   opens as many in one write is served, burst after burst. Node counts the streams closed in
 *   the same read against SETTINGS_MAX_CONCURRENT_STREAMS: the waypoint advertises 200 so that
 *   they fit, where 100 got every new stream refused (ENHANCE_YOUR_CALM);
 * - a client at the advertised limit doing the same gets refusals at worst, never its session
 *   closed (Node's refused-streams limit is at least the stream limit);
 * - a rapid-reset flood, fast (many per read) or slow (a few per read), gets its session closed,
 *   counted and warned about with the reason; slow ones by Envoy's premature-reset rule
 *   (GOAWAY ENHANCE_YOUR_CALM);
 * - a client over its stream rate (`limits.peerStreamRate`) gets GOAWAY ENHANCE_YOUR_CALM, as the
 *   README says (it was NO_ERROR);
 * - malformed CONNECTs that nghttp2 resets are counted even when no later stream follows them.
 * The floods come last: they spend the client's stream budget.
 * Addresses: 127.0.11.x and 127.0.12.x.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { LocalCa } from '../../../src/identity/ca.ts';
import { log } from '../../../src/util/log.ts';
import { parsePrometheus } from '../../helpers/prometheus.ts';
import { startTestTopology, type TestTopology } from '../../helpers/topology.ts';
import { h2peer } from './h2-peer.ts';

const ENHANCE_YOUR_CALM = 11;
let topo: TestTopology;
let limited: TestTopology;
const apps: http.Server[] = [];

async function withApps(net: number, extra: Parameters<typeof startTestTopology>[1] = {}): Promise<TestTopology> {
  const t = await startTestTopology(net, { backends: false, ...extra });
  for (const ip of [`127.0.${net}.11`, `127.0.${net}.12`]) {
    const app = http.createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => app.listen(8080, ip, r));
    apps.push(app);
  }
  const ca = await LocalCa.load(t.caDir);
  const leaf = await ca.issue('spiffe://cluster.local/ns/demo/sa/client', 3600_000);
  fs.writeFileSync(path.join(t.dir, 'py-cert.pem'), leaf.certPem);
  fs.writeFileSync(path.join(t.dir, 'py-key.pem'), leaf.keyPem);
  return t;
}

beforeAll(async () => {
  topo = await withApps(11);
  limited = await withApps(12, { bootstrap: { limits: { peerStreamRate: 10, peerStreamBurst: 20 } } });
});
afterAll(async () => {
  for (const a of apps) {
    a.closeAllConnections();
    a.close();
  }
  await topo?.close();
  await limited?.close();
});

interface Round {
  ok: number;
  reset: Record<string, number>;
  open: number;
}
interface PeerResult {
  rounds: Round[];
  limit: number;
  sent: number;
  goaway: { code: number } | null;
  eof: boolean;
  streams: Record<string, { status?: number; reset?: number }>;
}

function peer(t: TestTopology, mode: string, n: number): Promise<PeerResult> {
  const { address, port } = t.waypoint!.addresses.hbone;
  // The topology's Service VIP: 127.0.<net>.100.
  return h2peer(t.dir, [address, port], `${address.replace(/\.1$/, '.100')}:80`, mode, n) as unknown as Promise<PeerResult>;
}

async function counter(t: TestTopology, name: string, reason?: string): Promise<number> {
  const res = await fetch(`http://${t.waypoint!.addresses.admin.address}:${t.waypoint!.addresses.admin.port}/stats/prometheus`);
  return parsePrometheus(await res.text()).find((x) => x.name === name && x.labels.reason === reason)?.value ?? 0;
}
const closedSessions = (t: TestTopology, reason: string) => counter(t, 'waypoint_hbone_sessions_closed_total', reason);

test('a client with 100 streams open that resets them all and opens 100 new ones in one write is served, burst after burst', { timeout: 60_000 }, async () => {
  const r = await peer(topo, 'cancel-burst', 100);
  expect(r.goaway).toBeNull();
  expect(r.rounds).toEqual(Array.from({ length: 4 }, () => ({ ok: 100, reset: {}, open: 0 })));
});

test('a client at the advertised stream limit doing the same is never sent GOAWAY; refused streams at worst', { timeout: 60_000 }, async () => {
  const r = await peer(topo, 'cancel-burst', 0);
  expect(r.limit).toBe(200);
  expect(r.goaway).toBeNull();
  expect(r.eof).toBe(false);
  for (const round of r.rounds) {
    expect(round.open).toBe(0);
    expect(round.ok + (round.reset[ENHANCE_YOUR_CALM] ?? 0)).toBe(200);
  }
  // The first round, and every round after a refused one, is served whole.
  expect(r.rounds[0].ok).toBe(200);
  expect(r.rounds.some((x, i) => i > 0 && x.ok === 200)).toBe(true);
});

test('malformed CONNECTs that are the last streams of their session are counted when it ends', { timeout: 60_000 }, async () => {
  const rejected = () => counter(topo, 'waypoint_hbone_streams_rejected_total', 'codec');
  const before = await rejected();
  const r = await peer(topo, 'malformed-last', 3);
  // nghttp2 resets each with PROTOCOL_ERROR before the waypoint sees it.
  expect(Object.values(r.streams).map((s) => s.reset)).toEqual([1, 1, 1]);
  await expect.poll(rejected, { timeout: 5000 }).toBe(before + 3);
});

test('a rapid-reset flood gets its session closed, counted and warned about with the reason', { timeout: 60_000 }, async () => {
  const warn = vi.spyOn(log, 'warn');
  try {
    const r = await peer(topo, 'rapid-reset', 40_000);
    expect(r.goaway !== null || r.eof).toBe(true);
    expect(r.sent).toBeLessThan(40_000);
    const line = warn.mock.calls.find((c) => /HBONE (session closed by the HTTP\/2 layer|client resets most of its streams)/.test(String(c[1])));
    expect(line?.[0]).toMatchObject({ peer: 'spiffe://cluster.local/ns/demo/sa/client' });
    expect((await closedSessions(topo, 'refused_streams')) + (await closedSessions(topo, 'premature_resets'))).toBeGreaterThan(0);
  } finally {
    warn.mockRestore();
  }
});

test('a slow rapid-reset flood (a few streams per read) is caught by the premature-reset rule: its budget spent, GOAWAY ENHANCE_YOUR_CALM', { timeout: 60_000 }, async () => {
  const before = { caught: await counter(topo, 'waypoint_hbone_too_many_premature_resets_total'), closed: await closedSessions(topo, 'peer_stream_rate') };
  const warn = vi.spyOn(log, 'warn');
  try {
    const r = await peer(topo, 'rapid-reset-slow', 3000);
    expect(r.goaway?.code).toBe(ENHANCE_YOUR_CALM);
    // Half of Envoy's 500 streams premature: caught right after the 250th.
    expect(r.sent).toBeLessThan(1000);
    expect(await counter(topo, 'waypoint_hbone_too_many_premature_resets_total')).toBe(before.caught + 1);
    // Its next stream was refused over its (spent) stream budget, which closed the session.
    expect(await closedSessions(topo, 'peer_stream_rate')).toBe(before.closed + 1);
    const line = warn.mock.calls.find((c) => String(c[1]).startsWith('HBONE client resets most of its streams before using them'));
    expect(line?.[0]).toMatchObject({ reason: 'premature_resets', peer: 'spiffe://cluster.local/ns/demo/sa/client' });
  } finally {
    warn.mockRestore();
  }
});

test('a client over its stream rate gets GOAWAY ENHANCE_YOUR_CALM', { timeout: 60_000 }, async () => {
  const r = await peer(limited, 'streams', 40);
  expect(r.goaway?.code).toBe(ENHANCE_YOUR_CALM);
  expect(await closedSessions(limited, 'peer_stream_rate')).toBe(1);
});
