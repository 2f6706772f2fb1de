import { defineConfig } from 'vitest/config';

// Long-running leak and endurance checks (`npm run soak`), kept out of `npm test`.
export default defineConfig({
  test: {
    include: ['test/soak/**/*.test.ts'],
    testTimeout: 600_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: false,
    reporters: ['default', './test/summary-reporter.ts'],
  },
});
