/**
 * Cancelled downloads release everything they held (tunnel, h2c session, request, the upstream's
 * unread response), at once rather than when a timer fires minutes later:
 *  - a source that half-closes its CONNECT after a keep-alive request and stops reading (a client
 *    gone away) gets its tunnel reset and the upstream request cancelled, not after the 5-minute
 *    stream idle timeout with the upstream's 4 MiB window of unread body held meanwhile;
 *  - tunnels the waypoint destroys mid-response (the upstream reset) and h2c sessions whose
 *    client dropped the connection are not kept alive by their idle timers (Node does not clear
 *    the timer of an HTTP/2 stream or session destroyed while open).
 * Checked after forced GC: weak references to each request, tunnel and h2c session are cleared,
 * and buffer memory is back near its baseline. The long version is
 * test/soak/cancelled-downloads.soak.test.ts. Addresses: 127.0.217.x.
 */
import { afterAll, beforeAll, expect, test } from 'vitest';
import { alive, startRig, type Rig } from './cancelled-downloads-rig.ts';
import { sleep } from '../helpers/servers.ts';

const COUNT = 16;
let rig: Rig;

beforeAll(async () => {
  rig = await startRig(217);
});

afterAll(async () => {
  await rig?.close();
});

/** Forget earlier references and return the buffer memory in use once collected. */
async function baseline(): Promise<number> {
  for (const k of Object.values(rig.held)) k.length = 0;
  await rig.collect();
  return process.memoryUsage().arrayBuffers;
}

test('a source that half-closes after a keep-alive request and stops reading: tunnel reset and upstream cancelled now, nothing held', async () => {
  const base = await baseline();
  try {
    for (let i = 0; i < COUNT; i++) await rig.cancel('fin-no-read', `/gone-${i}`);
    // The upstream requests are cancelled: no app is still sending.
    await expect.poll(() => rig.sending.size, { timeout: 5000 }).toBe(0);
    for (let i = 0; i < COUNT; i++) expect((await rig.rec.find(`/gone-${i}`)).flags).toBe('DC');
    await rig.collect();
    expect(alive(rig.held.stream)).toBe(0);
    expect(alive(rig.held.tunnel)).toBe(0);
    // Each held request kept up to the upstream's 4 MiB stream window of unread body.
    expect(process.memoryUsage().arrayBuffers - base).toBeLessThan(16 * 1024 * 1024);
  } finally {
    rig.releaseClients();
  }
});

test('tunnels reset by the waypoint mid-response (the upstream reset) are released, not held by their idle timer', async () => {
  await baseline();
  await Promise.all(Array.from({ length: COUNT }, (_, i) => rig.cancel('upstream-cut', `-${i}`)));
  await expect.poll(() => rig.sending.size, { timeout: 5000 }).toBe(0);
  await sleep(200);
  await rig.collect();
  expect(rig.held.tunnel.length).toBe(COUNT);
  expect(alive(rig.held.stream)).toBe(0);
  expect(alive(rig.held.tunnel)).toBe(0);
});

test('h2c clients that drop their connection mid-download: their sessions and requests are released', async () => {
  const base = await baseline();
  await Promise.all(Array.from({ length: COUNT }, (_, i) => rig.cancel('h2c-drop', `/h2-drop-${i}`)));
  await expect.poll(() => rig.sending.size, { timeout: 5000 }).toBe(0);
  await sleep(200);
  await rig.collect();
  expect(rig.held.session.length).toBe(COUNT);
  expect(alive(rig.held.stream)).toBe(0);
  expect(alive(rig.held.session)).toBe(0);
  expect(process.memoryUsage().arrayBuffers - base).toBeLessThan(16 * 1024 * 1024);
});
