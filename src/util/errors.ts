/**
 * Every error the waypoint raises on purpose, with a stable `code`. Data-path failures carry the
 * HTTP status and Envoy response flag they map to (see `pipeline/local-reply.ts`); configuration
 * failures carry the file position so the CLI can print `file:line: message` and exit non-zero.
 */

/** Where a configuration error was found. All fields optional: fill what is known. */
export interface ConfigLocation {
  readonly file?: string;
  /** 1-based line in `file`. */
  readonly line?: number;
  /** 0-based index of the YAML document in a multi-document file. */
  readonly document?: number;
  /** `Kind/namespace/name` or `Kind/name` of the object at fault. */
  readonly object?: string;
  /** Dotted path of the offending field, e.g. `spec.ports[0].port`. */
  readonly field?: string;
}

/** Base class: `code` is a `WP_ERR_*` constant. */
export class WaypointError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'WaypointError';
  }
}

/** Invalid configuration or mesh state: fatal at start-up, logged-and-ignored on reload. */
export class ConfigError extends WaypointError {
  readonly location: ConfigLocation;
  constructor(message: string, location: ConfigLocation = {}, options?: { cause?: unknown }) {
    super('WP_ERR_CONFIG', message, options);
    this.name = 'ConfigError';
    this.location = location;
  }

  /** `file:line: document N (Kind/ns/name) field: message` — as much as is known. */
  override toString(): string {
    const l = this.location;
    const parts: string[] = [];
    if (l.file) parts.push(l.line ? `${l.file}:${l.line}` : l.file);
    if (l.document !== undefined) parts.push(`document ${l.document}`);
    if (l.object) parts.push(l.object);
    if (l.field) parts.push(`field ${l.field}`);
    return parts.length ? `${parts.join(': ')}: ${this.message}` : this.message;
  }
}
