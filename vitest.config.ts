import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // As the waypoint's module loader makes it resolve at run time (src/extensions/loader.ts): a
    // filter module imports the running waypoint's filter API wherever it lives; the example filter's
    // tests (examples/, a package of their own) import the testing entry as an installed package.
    alias: {
      'node-waypoint/filter-api': fileURLToPath(new URL('./src/pipeline/index.ts', import.meta.url)),
      'node-waypoint/testing': fileURLToPath(new URL('./src/demo/index.ts', import.meta.url)),
    },
  },
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Long-running checks: `npm run soak` (vitest.soak.config.ts).
    exclude: ['test/soak/**', '**/node_modules/**'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Each test file binds its own 127.x range, so files may run in parallel. Two forks even on two
    // cores (vitest's default is cores - 1): most files spend their time waiting on sockets and timers.
    fileParallelism: true,
    maxWorkers: 2,
    reporters: ['default', './test/summary-reporter.ts'],
  },
});
