/**
 * Istio MeshConfig (istio/api mesh/v1alpha1/config.proto), the YAML found under `data.mesh` of the
 * `istio` ConfigMap in the root namespace. Only the fields this project reads are typed; the rest
 * is kept in `raw`.
 */
import { LineCounter, isMap, isScalar, parseDocument } from 'yaml';
import { z } from 'zod';

import { ConfigError, type ConfigLocation, deepFreeze } from '../util/index.ts';
import { buildTelemetryConfig, DEFAULT_TELEMETRY_CONFIG, TELEMETRY_FIELDS } from './telemetry-config.ts';
import type { MeshConfig } from './types.ts';
import { formatFieldPath, lineOf, nodeAt, type FieldPath } from './yaml-locate.ts';

/**
 * Istio's defaults: trust domain `cluster.local`, no aliases, root namespace `istio-system`, access
 * log off (`accessLogFile: ""`) with `TEXT` encoding.
 */
export const DEFAULT_MESH_CONFIG: MeshConfig = deepFreeze({
  trustDomain: 'cluster.local',
  trustDomainAliases: [],
  rootNamespace: 'istio-system',
  accessLogFile: '',
  accessLogEncoding: 'TEXT',
  telemetry: DEFAULT_TELEMETRY_CONFIG,
  raw: {},
});

const got = (v: unknown) => `got ${JSON.stringify(v)}`;

const MeshConfigSchema = z.looseObject({
  trustDomain: z.string({ error: (iss) => `must be a string, ${got(iss.input)}` }).nullish(),
  trustDomainAliases: z
    .array(z.string({ error: (iss) => `must be a string, ${got(iss.input)}` }).min(1, { error: 'must not be empty' }), {
      error: (iss) => `must be a list of strings, ${got(iss.input)}`,
    })
    .nullish(),
  rootNamespace: z.string({ error: (iss) => `must be a string, ${got(iss.input)}` }).nullish(),
  accessLogFile: z.string({ error: (iss) => `must be a string, ${got(iss.input)}` }).nullish(),
  accessLogEncoding: z.enum(['TEXT', 'JSON'], { error: (iss) => `must be TEXT or JSON, ${got(iss.input)}` }).nullish(),
  ...TELEMETRY_FIELDS,
});

/**
 * Parse MeshConfig YAML. Empty text ⇒ {@link DEFAULT_MESH_CONFIG}; an empty `trustDomain` or
 * `rootNamespace` falls back to the default, like istiod. For convenience the text may also be a
 * whole `ConfigMap` object, whose `data.mesh` is then parsed.
 *
 * `where` says where `text` sits: `file`, `line` = the file line holding line 1 of `text` (default
 * 1), `object` and `field` (prefix for field paths, e.g. `data.mesh`). Errors are reported there.
 * @throws ConfigError on YAML syntax errors, a non-mapping document, or a field of the wrong type.
 */
export function parseMeshConfig(text: string, where: ConfigLocation = {}): MeshConfig {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, prettyErrors: false });
  const base = (where.line ?? 1) - 1;
  const at = (path: FieldPath, line: number | undefined): ConfigLocation => {
    const field = [where.field, formatFieldPath(path)].filter(Boolean).join('.');
    return { ...where, line: line === undefined ? where.line : base + line, ...(field ? { field } : {}) };
  };
  const syntax = doc.errors[0];
  if (syntax) {
    const message = syntax.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
    throw new ConfigError(`MeshConfig YAML syntax error: ${message}`, at([], counter.linePos(syntax.pos[0]).line));
  }
  if (doc.contents === null) return DEFAULT_MESH_CONFIG;
  if (!isMap(doc.contents)) {
    throw new ConfigError('MeshConfig must be a YAML mapping', at([], lineOf(doc, counter, [])));
  }
  const value = doc.toJS() as Record<string, unknown>;
  if (value.kind === 'ConfigMap') {
    const mesh = nodeAt(doc, ['data', 'mesh']);
    if (!isScalar(mesh) || typeof mesh.value !== 'string' || !mesh.range) {
      throw new ConfigError('ConfigMap has no string data.mesh', at(['data', 'mesh'], lineOf(doc, counter, ['data', 'mesh'])));
    }
    const line = counter.linePos(mesh.range[0]).line;
    const block = mesh.type === 'BLOCK_LITERAL' || mesh.type === 'BLOCK_FOLDED';
    return parseMeshConfig(mesh.value, { ...where, line: base + line + (block ? 1 : 0), field: 'data.mesh' });
  }
  const result = MeshConfigSchema.safeParse(value);
  if (!result.success) {
    // A misspelled field is the cause of the "missing" one next to it: it is reported first.
    const issues = result.error.issues;
    const issue = issues.find((i) => i.code === 'unrecognized_keys' || i.message.startsWith('unknown field')) ?? issues[0];
    // An unknown field is located at its own line (the issue's path is the mapping holding it).
    const path = [...issue.path, ...(issue.code === 'unrecognized_keys' ? issue.keys.slice(0, 1) : [])].filter((p): p is string | number => typeof p !== 'symbol');
    throw new ConfigError(`MeshConfig ${formatFieldPath(path)} ${issue.message}`, at(path, lineOf(doc, counter, path)));
  }
  const m = result.data;
  return deepFreeze({
    trustDomain: m.trustDomain || DEFAULT_MESH_CONFIG.trustDomain,
    trustDomainAliases: [...(m.trustDomainAliases ?? [])],
    rootNamespace: m.rootNamespace || DEFAULT_MESH_CONFIG.rootNamespace,
    accessLogFile: m.accessLogFile ?? DEFAULT_MESH_CONFIG.accessLogFile,
    accessLogEncoding: m.accessLogEncoding ?? DEFAULT_MESH_CONFIG.accessLogEncoding,
    telemetry: buildTelemetryConfig(m),
    raw: value,
  });
}
