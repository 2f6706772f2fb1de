/**
 * README "Write a filter" quotes examples/tenant-filter/index.ts whole (after its header comment),
 * so the example users read is the one the tests load, type-check and run.
 */
import fs from 'node:fs';
import { expect, test } from 'vitest';

test('the README example is the example file', () => {
  const readme = fs.readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
  const example = fs.readFileSync(new URL('../../../examples/tenant-filter/index.ts', import.meta.url), 'utf8');
  const body = example.slice(example.indexOf("import { z } from 'zod';"));
  expect(readme).toContain(`\`\`\`ts\n${body}\`\`\`\n`);
});
