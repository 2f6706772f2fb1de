import { expect, test } from 'vitest';
import { forwardedFor } from '../../../src/peer/forwarded.ts';

test.each([
  ['for=10.0.0.1', '10.0.0.1'],
  ['for="[fd00::20]"', 'fd00::20'],
  ['for="[fd00::20]:4711";proto=http', 'fd00::20'],
  ['for=10.0.0.1:4711', '10.0.0.1'],
  ['proto=https;For=10.0.0.2, for=10.0.0.3', '10.0.0.2'],
  ['for=::ffff:10.0.0.4', '10.0.0.4'],
])('%s → %s', (header, ip) => {
  expect(forwardedFor(header)).toBe(ip);
});

test.each(['', 'for=unknown', 'for=_hidden', 'by=10.0.0.1', 'for='])('%j has no client address', (header) => {
  expect(forwardedFor(header)).toBeUndefined();
});
