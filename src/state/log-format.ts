/**
 * Envoy's access-log format strings (envoyproxy/envoy source/common/formatter
 * substitution_format_string.cc, command operators of docs "Access logging"), as MeshConfig
 * `extensionProviders[].envoyFileAccessLog.logFormat` (`text`, or `labels` for a JSON object) and
 * Telemetry `tracing[].customTags[].formatter` carry them: parsed once into literal text and
 * operators, so writing a line is a walk over the parts.
 *
 * Only the operators the waypoint records are accepted (those of Istio's default formats plus any
 * request header); any other operator is refused with the list, never printed as `-` silently.
 */

/** A command operator the waypoint can fill. */
export type LogOperator =
  | 'START_TIME'
  | 'REQ'
  | 'RESP'
  | 'PROTOCOL'
  | 'RESPONSE_CODE'
  | 'RESPONSE_FLAGS'
  | 'RESPONSE_CODE_DETAILS'
  | 'CONNECTION_TERMINATION_DETAILS'
  | 'UPSTREAM_TRANSPORT_FAILURE_REASON'
  | 'BYTES_RECEIVED'
  | 'BYTES_SENT'
  | 'DURATION'
  | 'UPSTREAM_HOST'
  | 'UPSTREAM_CLUSTER'
  | 'UPSTREAM_CLUSTER_RAW'
  | 'UPSTREAM_LOCAL_ADDRESS'
  | 'DOWNSTREAM_LOCAL_ADDRESS'
  | 'DOWNSTREAM_REMOTE_ADDRESS'
  | 'REQUESTED_SERVER_NAME'
  | 'ROUTE_NAME';

const OPERATORS: ReadonlySet<string> = new Set<LogOperator>([
  'START_TIME',
  'REQ',
  'RESP',
  'PROTOCOL',
  'RESPONSE_CODE',
  'RESPONSE_FLAGS',
  'RESPONSE_CODE_DETAILS',
  'CONNECTION_TERMINATION_DETAILS',
  'UPSTREAM_TRANSPORT_FAILURE_REASON',
  'BYTES_RECEIVED',
  'BYTES_SENT',
  'DURATION',
  'UPSTREAM_HOST',
  'UPSTREAM_CLUSTER',
  'UPSTREAM_CLUSTER_RAW',
  'UPSTREAM_LOCAL_ADDRESS',
  'DOWNSTREAM_LOCAL_ADDRESS',
  'DOWNSTREAM_REMOTE_ADDRESS',
  'REQUESTED_SERVER_NAME',
  'ROUTE_NAME',
]);

/** The only response header the waypoint keeps for the log (Istio's default format reads it). */
const RESPONSE_HEADERS: ReadonlySet<string> = new Set(['x-envoy-upstream-service-time']);

/** One operator of a format: `%REQ(X-FOO?X-BAR):10%` is `{ op: 'REQ', header: 'x-foo', alt: 'x-bar', maxLength: 10 }`. */
export interface FormatOperator {
  readonly op: LogOperator;
  /** REQ/RESP: the header, lower-case (`:method`, `:path`, `:authority` are the request line's). */
  readonly header?: string;
  /** REQ: the header read when `header` is absent (`X-ENVOY-ORIGINAL-PATH?:PATH`). */
  readonly alt?: string;
  /** `:N` after the operator: at most N characters. */
  readonly maxLength?: number;
}

/** A parsed format: literal text and operators, in order. */
export type FormatParts = readonly (string | FormatOperator)[];

/** A `logFormat`: a line (`text`, newline added when missing, as Envoy) or a JSON object (`labels`). */
export type LogFormat = { readonly kind: 'text'; readonly parts: FormatParts } | { readonly kind: 'labels'; readonly fields: readonly (readonly [string, FormatParts])[] };

const TOKEN = /%([A-Z_]+)(?:\(([^)]*)\))?(?::(\d+))?%/g;

/**
 * Parse a format string. @throws Error naming the first operator that is unknown, misses its
 * argument, or is not one the waypoint fills.
 */
export function parseFormat(text: string): FormatParts {
  const parts: (string | FormatOperator)[] = [];
  let last = 0;
  for (const m of text.matchAll(TOKEN)) {
    if (m.index > last) parts.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    parts.push(operator(m[0], m[1], m[2], m[3]));
  }
  if (last < text.length) parts.push(text.slice(last));
  return Object.freeze(parts);
}

function operator(token: string, name: string, arg: string | undefined, max: string | undefined): FormatOperator {
  if (!OPERATORS.has(name)) {
    throw new Error(`unsupported command operator ${token} (supported: ${[...OPERATORS].map((o) => `%${o}%`).join(', ')})`);
  }
  const op = name as LogOperator;
  const maxLength = max === undefined ? undefined : Number(max);
  if (op === 'REQ' || op === 'RESP') {
    if (!arg) throw new Error(`${token} needs a header name: %${op}(X-HEADER)%`);
    const [header, alt] = arg.toLowerCase().split('?');
    if (op === 'RESP' && !RESPONSE_HEADERS.has(header)) throw new Error(`${token}: the waypoint logs no response header but x-envoy-upstream-service-time`);
    return Object.freeze({ op, header, ...(alt ? { alt } : {}), ...(maxLength !== undefined ? { maxLength } : {}) });
  }
  if (arg !== undefined) throw new Error(`${token}: the waypoint supports ${op} without an argument`);
  return Object.freeze({ op, ...(maxLength !== undefined ? { maxLength } : {}) });
}

/** Parse `logFormat` (`text` or `labels`). @throws Error as {@link parseFormat}, prefixed with the label. */
export function parseLogFormat(format: { text?: string; labels?: Record<string, unknown> }): LogFormat | undefined {
  if (format.text !== undefined) {
    const text = format.text.endsWith('\n') ? format.text : `${format.text}\n`;
    return Object.freeze({ kind: 'text', parts: parseFormat(text) });
  }
  if (format.labels !== undefined) {
    const fields = Object.entries(format.labels).map(([k, v]) => {
      if (typeof v !== 'string') throw new Error(`labels.${k}: must be a string, got ${JSON.stringify(v)}`);
      try {
        return Object.freeze([k, parseFormat(v)] as const);
      } catch (err) {
        throw new Error(`labels.${k}: ${(err as Error).message}`);
      }
    });
    return Object.freeze({ kind: 'labels', fields: Object.freeze(fields) });
  }
  return undefined;
}
