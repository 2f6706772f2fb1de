/**
 * Where a field of a kept resource (AuthorizationPolicy, RequestAuthentication, ...) is, for the
 * ConfigError its validation throws: file, line, document, object and field when the resource was
 * read from a mesh file (`KeptResource.locate`), else the object and field alone.
 */
import type { ConfigLocation } from '../util/index.ts';
import type { KeptResource } from './types.ts';
import { formatFieldPath, type FieldPath } from './yaml-locate.ts';

/** The location of `path` in `resource`, named `ref` (e.g. `AuthorizationPolicy/foo/deny-admin`). */
export function locateField(resource: Pick<KeptResource, 'locate'>, ref: string, path: FieldPath): ConfigLocation {
  const where = resource.locate?.(path);
  if (where) return { ...where, object: ref };
  return path.length ? { object: ref, field: formatFieldPath(path) } : { object: ref };
}
