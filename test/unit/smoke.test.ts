import { test, expect } from 'vitest';
test('runs on Node 24', () => {
  expect(Number(process.versions.node.split('.')[0])).toBeGreaterThanOrEqual(24);
});
