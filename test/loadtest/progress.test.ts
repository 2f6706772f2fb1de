/**
 * The progress line: redrawn in place with a bar on a terminal, plain lines elsewhere (CI logs),
 * with elapsed/planned, what remains, the current rate, errors and p99.
 */
import { Writable } from 'node:stream';
import { expect, test } from 'vitest';
import { progressDisplay, type Progress } from '../../src/loadtest/index.ts';
import { sleep } from '../helpers/servers.ts';

function sink(tty: boolean): { stream: NodeJS.WriteStream; text: () => string } {
  let out = '';
  const w = new Writable({
    write(chunk: Buffer, _enc, cb) {
      out += chunk.toString();
      cb();
    },
  });
  Object.assign(w, { isTTY: tty, columns: 160 });
  return { stream: w as unknown as NodeJS.WriteStream, text: () => out };
}

const at = (elapsedMs: number, errors: number, p99Us: number): Progress => ({ phase: 'measure', elapsedMs, plannedMs: 2_000, completed: elapsedMs / 5, planned: 400, errors, p99Us });
const sample = { tMs: 1_000, completed: 200, ok: 197, errors: 3, rps: 200, p50Us: 800, p90Us: 1_500, p99Us: 4_780, maxUs: 9_000, inFlight: 2, queued: 0 };

test('off a terminal: plain lines, the last one when the run is done', async () => {
  const s = sink(false);
  const p = progressDisplay(s.stream, 50);
  p.update(at(1_000, 3, 4_780), sample);
  await sleep(120);
  p.stop();
  const lines = s.text().split('\n').filter(Boolean);
  expect(lines[0]).toBe('loadtest: measuring 1.0s/2.0s ETA 1.0s | 200 req/s | errors 3 | p99 4.78 ms');
  expect(lines.at(-1)).toBe('loadtest: done 2.0s/2.0s ETA 0.0s | 200 req/s | errors 3 | p99 4.78 ms');
  expect(s.text()).not.toContain('\x1b[');
});

test('on a terminal: one line redrawn in place, with a bar', () => {
  const s = sink(true);
  const p = progressDisplay(s.stream);
  p.update(at(1_000, 0, 2_000), sample);
  p.stop();
  const text = s.text();
  expect(text).toContain('\x1b[');
  expect(text).toMatch(/loadtest █+ done 2\.0s\/2\.0s ETA 0\.0s \| 200 req\/s \| errors 0 \| p99 2 ms/);
  expect(text.split('\n').filter(Boolean).length).toBeLessThanOrEqual(2);
});

test('interrupted: the last line says so where the run stopped, not "done" at the planned end', async () => {
  const s = sink(false);
  const p = progressDisplay(s.stream, 50);
  p.update(at(1_000, 0, 2_000), sample);
  await sleep(120);
  p.stop(true);
  expect(s.text().split('\n').filter(Boolean).at(-1)).toBe('loadtest: interrupted 1.0s/2.0s ETA - | 200 req/s | errors 0 | p99 2 ms');
});

test('in the warm-up, what remains includes the rest of the warm-up', () => {
  const s = sink(false);
  const p = progressDisplay(s.stream, 50);
  p.update({ phase: 'warmup', elapsedMs: -3_000, plannedMs: 10_000, completed: 0, planned: null, errors: 0, p99Us: 0 }, undefined);
  p.stop(true);
  expect(s.text().split('\n')[0]).toBe('loadtest: warm-up 0.0s/10.0s ETA 13.0s | 0 req/s | errors 0 | p99 -');
});
