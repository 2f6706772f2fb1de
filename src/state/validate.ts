/**
 * Run a zod schema over (part of) a {@link SourceObject} and turn the first issue into a
 * ConfigError that names the file, line, document, object and field.
 */
import type { z } from 'zod';

import type { ConfigError } from '../util/index.ts';
import type { SourceObject } from './source.ts';
import type { FieldPath } from './yaml-locate.ts';

/**
 * Validate `value` (default: the whole object body) against `schema`.
 * `at` is where `value` sits inside the object, so issue paths are reported relative to the object.
 * @returns the parsed (and, per schema, stripped) value.
 * @throws ConfigError for the first issue zod reports.
 */
export function parseAs<S extends z.ZodType>(schema: S, obj: SourceObject, value: unknown = obj.body, at: FieldPath = []): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw issueToError(result.error.issues[0], obj, at);
}

function issueToError(issue: z.core.$ZodIssue, obj: SourceObject, at: FieldPath): ConfigError {
  const path = [...at, ...issue.path.filter((p): p is string | number => typeof p !== 'symbol')];
  return obj.fail(issue.message, path);
}
