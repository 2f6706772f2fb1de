import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Long-running checks: `npm run soak` (vitest.soak.config.ts).
    exclude: ['test/soak/**', '**/node_modules/**'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Each test file binds its own 127.x range, so files may run in parallel.
    fileParallelism: true,
    reporters: ['default', './test/summary-reporter.ts'],
  },
});
