/**
 * The per-check view of {@link RequestAttributes} that compiled matchers read: it parses the IP
 * attributes at most once per check, and maps pseudo-header names for `request.headers[...]`.
 */
import { parseRequestIp, type ParsedIp } from './ip-match.ts';
import type { RequestAttributes } from './types.ts';

/** A compiled matcher over one check. */
export type Predicate = (ctx: EvalContext) => boolean;

const UNSET = Symbol('unset');

/** Pseudo-headers a `request.headers[...]` condition reads from the request attributes, not the header list. */
export const PSEUDO_HEADERS: ReadonlySet<string> = new Set([':authority', ':method', ':path']);

/**
 * Mutable on purpose: an evaluator reuses one instance per check ({@link EvalContext.reset}) so a
 * decision allocates nothing but its result. Checks are synchronous, so no two overlap.
 */
export class EvalContext {
  attrs: RequestAttributes = {};
  #sourceIp: ParsedIp | undefined | typeof UNSET = UNSET;
  #remoteIp: ParsedIp | undefined | typeof UNSET = UNSET;
  #destinationIp: ParsedIp | undefined | typeof UNSET = UNSET;
  #hostLower: string | undefined | typeof UNSET = UNSET;

  /** Start a new check over `attrs`. */
  reset(attrs: RequestAttributes): this {
    this.attrs = attrs;
    this.#sourceIp = UNSET;
    this.#remoteIp = UNSET;
    this.#destinationIp = UNSET;
    this.#hostLower = UNSET;
    return this;
  }

  /** `source.ip`: the direct peer. */
  get sourceIp(): ParsedIp | undefined {
    if (this.#sourceIp === UNSET) this.#sourceIp = parseRequestIp(this.attrs.sourceIp);
    return this.#sourceIp;
  }

  /** `remote.ip`: the trusted client address, `source.ip` when the caller gave none. */
  get remoteIp(): ParsedIp | undefined {
    if (this.#remoteIp === UNSET) this.#remoteIp = this.attrs.remoteIp === undefined ? this.sourceIp : parseRequestIp(this.attrs.remoteIp);
    return this.#remoteIp;
  }

  /** `destination.ip`. */
  get destinationIp(): ParsedIp | undefined {
    if (this.#destinationIp === UNSET) this.#destinationIp = parseRequestIp(this.attrs.destinationIp);
    return this.#destinationIp;
  }

  /** `:authority` in lower case, for the case-insensitive `hosts` matchers (lowered once per check). */
  get hostLower(): string | undefined {
    if (this.#hostLower === UNSET) this.#hostLower = this.attrs.host?.toLowerCase();
    return this.#hostLower;
  }

  /**
   * `:authority`, `:method` or `:path` (names in {@link PSEUDO_HEADERS}): Envoy's header map holds
   * these pseudo-headers too, each with one value.
   */
  pseudoHeader(name: string): string | undefined {
    if (name === ':authority') return this.attrs.host;
    if (name === ':method') return this.attrs.method;
    if (name === ':path') return this.attrs.path;
    return undefined;
  }

  /** The values of a request header by lower-case name, one per header field (see `HeaderLookup`). */
  headerValues(name: string): readonly string[] | undefined {
    return this.attrs.headers?.values(name);
  }
}
