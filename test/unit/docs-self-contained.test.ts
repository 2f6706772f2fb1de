/**
 * The sources, the filters, the shared test helpers and the user docs cite upstream sources directly (istio/istio
 * pilot/pkg/..., envoyproxy/envoy source/..., istio/ztunnel src/..., an issue), never notes a
 * user does not have (`shared/`, `reference/*.md`, pitfall tags) nor shorthand repository
 * prefixes (`IS:`, `ENV:`, `ZT:`, `PX:`, `GW:`, `API:`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const FORBIDDEN = /shared\/|reference\/[a-z-]+\.md|[Pp]itfalls? [A-K][0-9]|\b(IS|ENV|ZT):|\b(PX|GW|API):[a-z]|\b(authz|hbone-waypoint|pitfalls|performance|style)\.md\b/;

function files(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = `${dir}/${e.name}`;
    return e.isDirectory() ? files(rel) : [rel];
  });
}

function hits(file: string): string[] {
  return fs
    .readFileSync(path.join(ROOT, file), 'utf8')
    .split('\n')
    .flatMap((line, i) => (FORBIDDEN.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : []));
}

// test/helpers is what a user writing a filter test reads and copies from.
const checked = [...files('src'), ...files('filters'), ...files('test/helpers'), 'README.md', 'filters/README.md', 'bench/README.md'];

test('src, filters, test/helpers and the READMEs cite upstream sources, not notes or shorthand prefixes', () => {
  expect(checked.length).toBeGreaterThan(100);
  expect(checked).toContain('test/helpers/filter-harness.ts');
  expect(checked.flatMap(hits)).toEqual([]);
});

test('the check recognises every forbidden form', () => {
  for (const bad of ['see shared/reference/authz.md', 'reference/pitfalls.md', 'pitfall B1', 'pitfalls D1, C3', '(IS:listener_waypoint.go)', 'ENV:source/common', 'ZT:src/copy.rs', 'PX:extensions/common', 'authz.md §6.1']) {
    expect(FORBIDDEN.test(bad), bad).toBe(true);
  }
  for (const good of ['istio/istio pilot/pkg/networking/core/listener_waypoint.go', 'RFC 9113 §8.1', 'envoyproxy/envoy#12131', 'CA:true', 'the filter API: what']) {
    expect(FORBIDDEN.test(good), good).toBe(false);
  }
});
