import { defineConfig } from 'vitest/config';
import base from './vitest.config.ts';

/**
 * The HBONE, L7 and drain tests once more, unchanged, with the waypoint as `waypoint run
 * --concurrency 2` runs it: a primary (in the test's process) and 2 worker processes sharing the
 * HBONE listener (WAYPOINT_TEST_CONCURRENCY; test/helpers/topology.ts). `npm test` runs this after
 * the main run (the same files bind the same addresses, so never beside it); `npm run test:workers`
 * alone.
 *
 * Left out: tests that read what lives in one waypoint process (a log spy, its certificate, overload
 * manager, metrics registry, config_dump method), that give it a filter object of their own (no
 * counterpart a worker can import; the recorder has one), or that read the recorder's arrays right
 * after a response without waiting (its records cross a process boundary).
 */
export const WORKERS_SET = [
  // HBONE: the listener (mTLS, CONNECT), TCP inside tunnels, half-closed and ended streams.
  'test/integration/hbone-listener.test.ts',
  'test/integration/tcp-relay.test.ts',
  'test/integration/transport/early-end.test.ts',
  // L7: h2c, gRPC, HTTP/1.1 timeouts and headers, authz (L7, and L4 with live policy changes), routing.
  'test/integration/l7/h2c.test.ts',
  'test/integration/l7/grpc.test.ts',
  'test/integration/l7/timeouts-headers.test.ts',
  'test/integration/authz/l7.test.ts',
  'test/integration/authz/l4.test.ts',
  'test/integration/routing/routes.test.ts',
  // Istio's metrics: one scrape of the primary sums what each worker counted.
  'test/integration/stats.test.ts',
  // Drain: the drain delay, idle and keep-alive HTTP/1.1 tunnels across the drain.
  'test/integration/drain-delay.test.ts',
  'test/integration/l7/drain-idle.test.ts',
  'test/integration/drain-keepalive.test.ts',
  // Drain with a gRPC call in flight; a new connection as the listener closes is refused.
  'test/integration/l7/drain.test.ts',
];

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: WORKERS_SET,
    env: { ...base.test?.env, WAYPOINT_TEST_CONCURRENCY: '2' },
  },
});
