/**
 * README "Tracing and the Telemetry API" shows the MeshConfig provider (the istio ConfigMap) and
 * the Telemetry as two blocks for two places; together in a mesh file they compile and turn
 * tracing on to that provider, as the README says.
 */
import fs from 'node:fs';
import { expect, test } from 'vitest';
import { compileTelemetry } from '../../../src/tracing/index.ts';
import { snapshotOf, waypointGateway } from '../../helpers/mesh.ts';

test('the README tracing example: the istio ConfigMap and the Telemetry compile into tracing to "otel"', () => {
  const readme = fs.readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
  const section = readme.slice(readme.indexOf('## Tracing and the Telemetry API'), readme.indexOf('**Which Telemetry applies**'));
  const blocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
  expect(blocks).toHaveLength(2);
  expect(blocks[0]).toMatch(/^apiVersion: v1\nkind: ConfigMap\n/);
  expect(blocks[1]).toMatch(/^apiVersion: telemetry\.istio\.io\/v1\nkind: Telemetry\n/);
  const snapshot = snapshotOf(blocks[0], blocks[1], waypointGateway('demo'));
  // Workload-addressed traffic gets the root namespace's Telemetry (no Service needed here).
  const tracing = compileTelemetry(snapshot).forTarget({ kind: 'workload' } as never).tracing;
  expect(tracing?.exporter).toMatchObject({ kind: 'provider', name: 'otel', otel: { port: 4317, protocol: 'grpc' } });
  expect(tracing?.samplingPercent).toBe(10);
});
