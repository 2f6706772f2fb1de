/**
 * A waypoint in a process of its own, for leak checks: run with `node --expose-gc` through
 * `child_process.fork`, so its memory and file descriptors are only its own. Arguments: the mesh
 * file, the CA directory and a JSON bootstrap patch. It sends `{ ready: hbonePort }`, answers each
 * `'measure'` message with `{ rss, heapUsed, heapTotal, external, arrayBuffers, fds, live }` after forced garbage collections, and on
 * SIGTERM shuts down gracefully and exits.
 */
import fs from 'node:fs';
import { Waypoint } from '../../../src/app.ts';
import { defaultBootstrap, overrideBootstrap } from '../../../src/config/bootstrap.ts';

const [meshFile, caDir, patch] = process.argv.slice(2);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc || !process.send) throw new Error('run with --expose-gc through child_process.fork');

// No drain delay unless the patch asks for one: nothing here follows the waypoint's readiness.
const bootstrap = overrideBootstrap(overrideBootstrap(defaultBootstrap(), { drain: { delayMs: 0 } }), JSON.parse(patch));
const wp = await Waypoint.start({ bootstrap, meshFile, caDir, watch: false });
process.send({ ready: wp.addresses.hbone.port });

process.on('message', async (m) => {
  if (m !== 'measure') return;
  // Two collections with a turn of the event loop between them, so finalizers of the first run.
  gc();
  await new Promise((r) => setImmediate(r));
  gc();
  const mem = process.memoryUsage();
  process.send!({ rss: mem.rss, heapUsed: mem.heapUsed, heapTotal: mem.heapTotal, external: mem.external, arrayBuffers: mem.arrayBuffers, fds: fs.readdirSync('/proc/self/fd').length, live: wp.liveCounts });
});
process.once('SIGTERM', () => {
  void wp.shutdown().then(() => process.exit(0));
});
