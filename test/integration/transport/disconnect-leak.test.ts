/**
 * A client that asks for large responses, stops reading and then disconnects must leave nothing
 * behind in the waypoint: its session, socket (file descriptor) and the buffered response bytes are
 * released once HTTP/2 keepalive declares the peer dead, and a later SIGTERM does not wait the
 * drain for it. The waypoint runs in a child process with forced GC (waypoint-child.ts); a longer
 * version is `npm run soak`. Addresses: 127.0.230.x.
 */
import { afterAll, beforeAll, test } from 'vitest';
import { checkNoLeak, startRig, type DisconnectRig } from './disconnect-harness.ts';

let rig: DisconnectRig;

beforeAll(async () => {
  rig = await startRig(230);
});
afterAll(async () => {
  await rig?.close();
});

test('clients that stop reading and vanish leave no session, socket, fd or buffered bytes behind; SIGTERM does not wait for them', { timeout: 90_000 }, async () => {
  await checkNoLeak(rig, { rounds: 4, streams: 4 });
});
