/**
 * Request path normalization before authorization (istio.io docs reference/config/security/normalization;
 * istio/istio#27409, CVE-2019-9901), as Istio
 * configures Envoy through `meshConfig.pathNormalization.normalization`:
 * - `NONE`: nothing changes;
 * - `BASE` (Istio's default): Envoy's `normalize_path`, i.e. Chromium's URL path canonicalizer
 *   (envoyproxy/envoy `source/common/chromium_url/url_canon_path.cc`, invoked by
 *   `PathUtil::canonicalPath` on the part before `?`): RFC 3986 dot-segment removal (`.`/`..`
 *   and their `%2e` spellings), `\` → `/`, one round of percent-decoding of unreserved characters
 *   (`%2d` `%2e` `%30-39` `%41-5a` `%5f` `%61-7a` `%7e`; other escapes kept as written),
 *   characters not allowed in a path percent-encoded, NUL or `%00` → rejected (400);
 * - `MERGE_SLASHES`: BASE, then runs of `/` become one;
 * - `DECODE_AND_MERGE_SLASHES`: first `%2F`/`%2f`/`%5C`/`%5c` decoded, then MERGE_SLASHES.
 * Path parameters (`;x=1`) are not special: `/admin;x=1` stays as is, and `..;` is not a dot
 * segment, exactly as in Envoy.
 *
 * The normalized path is used both for matching and for forwarding upstream; the query string is
 * kept for forwarding and dropped for matching (Envoy's RBAC `url_path`).
 */

/** MeshConfig `pathNormalization.normalization` values (istio/api mesh/v1alpha1/config.proto). */
export type PathNormalization = 'NONE' | 'BASE' | 'MERGE_SLASHES' | 'DECODE_AND_MERGE_SLASHES';

export const PATH_NORMALIZATIONS: readonly PathNormalization[] = ['NONE', 'BASE', 'MERGE_SLASHES', 'DECODE_AND_MERGE_SLASHES'];

/** Result of {@link normalizeRequestPath}. */
export interface NormalizedPath {
  /** Normalized URL path without query: what `paths`/`notPaths` match against. */
  readonly path: string;
  /** Normalized path plus the original `?query`: what is sent upstream (`:path`). */
  readonly forward: string;
}

// Character classes of Chromium's kPathCharLookup (url_canon_path.cc).
const PASS = 0;
const SPECIAL = 1;
const ESCAPE = 2 | SPECIAL;
const UNESCAPE = 4;
const INVALID = 8 | SPECIAL;

/** One class per byte 0x00–0xFF. */
const CLASS: Uint8Array = (() => {
  const t = new Uint8Array(256).fill(ESCAPE); // controls, space, high bytes, and the rest below
  t[0] = INVALID;
  for (const c of "!$&'()*+,/:;=@[]") t[c.charCodeAt(0)] = PASS;
  for (const c of '-_~') t[c.charCodeAt(0)] = UNESCAPE;
  for (let c = 0x30; c <= 0x39; c++) t[c] = UNESCAPE;
  for (let c = 0x41; c <= 0x5a; c++) t[c] = UNESCAPE;
  for (let c = 0x61; c <= 0x7a; c++) t[c] = UNESCAPE;
  t[0x2e] = SPECIAL; // '.', handled by the dot logic
  // '"' '#' '%' '<' '>' '?' '\\' '^' '`' '{' '|' '}' 0x7f stay ESCAPE ('%' and '\\' are special-cased).
  return t;
})();

const HEX = '0123456789ABCDEF';

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

/** Value of the escape `%XY` starting at `at` in `s`, or -1 (Chromium `DecodeEscaped`). */
function decodeEscaped(s: ArrayLike<number>, at: number, end: number): number {
  if (at + 3 > end) return -1;
  const hi = hexValue(s[at + 1]);
  const lo = hexValue(s[at + 2]);
  return hi < 0 || lo < 0 ? -1 : (hi << 4) | lo;
}

/** Length of a dot (`.` → 1, `%2e`/`%2E` → 3) at `at`, else 0 (Chromium `IsDot`). */
function dotLength(s: Uint8Array, at: number, end: number): number {
  if (s[at] === 0x2e) return 1;
  if (s[at] === 0x25 && at + 3 <= end && s[at + 1] === 0x32 && (s[at + 2] === 0x65 || s[at + 2] === 0x45)) return 3;
  return 0;
}

const isSlash = (c: number): boolean => c === 0x2f || c === 0x5c;

// Reused scratch buffers: canonicalization is synchronous, and a fresh Buffer per request costs a
// native call each way (≈1 µs here against ≈100 ns for the JS loops).
let inBuf = new Uint8Array(256);
let outBuf = new Uint8Array(1024);

/**
 * The path's bytes in the input scratch buffer: code units up to 0xFF are bytes (Node decodes the
 * request line as latin1), anything wider is UTF-8 encoded. Returns the byte count.
 */
function loadBytes(text: string): number {
  let wide = false;
  for (let i = 0; i < text.length && !wide; i++) wide = text.charCodeAt(i) > 0xff;
  const bytes: ArrayLike<number> = wide ? utf8Mixed(text) : { length: text.length };
  if (inBuf.length < bytes.length) inBuf = new Uint8Array(bytes.length * 2);
  if (wide) inBuf.set(bytes as Uint8Array);
  else for (let i = 0; i < text.length; i++) inBuf[i] = text.charCodeAt(i);
  return bytes.length;
}

function utf8Mixed(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (code <= 0xff) out.push(code);
    else out.push(...Buffer.from(ch, 'utf8'));
  }
  return Uint8Array.from(out);
}

/** ASCII string of `bytes[0, n)`, in chunks small enough for `fromCharCode.apply`. */
function asciiString(bytes: Uint8Array, n: number): string {
  let s = '';
  for (let i = 0; i < n; i += 8192) s += String.fromCharCode.apply(null, bytes.subarray(i, Math.min(n, i + 8192)) as unknown as number[]);
  return s;
}

/** True when Chromium's canonicalizer would return `path` unchanged: no special byte at all. */
function alreadyCanonical(path: string): boolean {
  if (path.charCodeAt(0) !== 0x2f) return false;
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i);
    if (c > 0x7f || CLASS[c] & SPECIAL) return false;
  }
  return true;
}

/**
 * Chromium's `CanonicalizePath` as Envoy snapshots it (`DoPath` + `DoPartialPath`), on the path
 * part of a request target. Returns undefined where Chromium reports failure (a NUL byte or `%00`),
 * which Envoy answers with 400.
 */
export function canonicalizePath(path: string): string | undefined {
  // Fast path (the common case): nothing to decode, resolve or escape.
  if (alreadyCanonical(path)) return path;
  const end = loadBytes(path);
  const spec = inBuf;
  // Output bytes: escaping at most triples each input byte, plus a leading '/'. `n` is the length.
  if (outBuf.length < end * 3 + 1) outBuf = new Uint8Array(end * 6 + 2);
  const out = outBuf;
  let n = 0;
  if (end === 0 || !isSlash(spec[0])) out[n++] = 0x2f;
  const pathBegin = 0;
  let lastInvalidPercent = Number.MIN_SAFE_INTEGER;
  let success = true;

  for (let i = 0; i < end; i++) {
    const c = spec[i];
    const flags = CLASS[c];
    if (!(flags & SPECIAL)) {
      out[n++] = c;
      continue;
    }
    const dot = dotLength(spec, i, end);
    if (dot > 0) {
      if (n > pathBegin && out[n - 1] === 0x2f) {
        // Chromium `ClassifyAfterDot`: "." or "./" is the current directory, ".." or "../" goes up.
        const after = i + dot;
        const second = after < end && !isSlash(spec[after]) ? dotLength(spec, after, end) : 0;
        const afterSecond = after + second;
        if (after === end) {
          i += dot - 1;
        } else if (isSlash(spec[after])) {
          i += dot;
        } else if (second > 0 && (afterSecond === end || isSlash(spec[afterSecond]))) {
          // Chromium `BackUpToPreviousSlash`: drop the last segment, never above the root.
          if (n - 1 !== pathBegin) {
            let k = n - 2;
            while (out[k] !== 0x2f && k > pathBegin) k--;
            n = k + 1;
          }
          i += afterSecond === end ? dot + second - 1 : dot + second;
        } else {
          out[n++] = 0x2e; // a dot in a file name
          i += dot - 1;
        }
      } else {
        out[n++] = 0x2e;
        i += dot - 1;
      }
    } else if (c === 0x5c) {
      out[n++] = 0x2f; // backslash → slash
    } else if (c === 0x25) {
      const value = decodeEscaped(spec, i, end);
      if (value >= 0) {
        i += 2;
        const vflags = CLASS[value];
        if (vflags & UNESCAPE) {
          out[n++] = value;
          // Chromium `CheckForNestedEscapes`: a '%' that did not start a valid escape must not
          // become one once the following characters are unescaped (`%%30%30` must not read `%00`).
          if (lastInvalidPercent >= n - 3) {
            const length = n;
            const lastUnescaped = out[n - 1];
            const appendNext = lastInvalidPercent === n - 2;
            if (!appendNext || (i + 1 !== end && spec[i + 1] < 0x80)) {
              if (appendNext) out[n++] = spec[i + 1];
              if (decodeEscaped(out, lastInvalidPercent, n) >= 0) {
                if (!appendNext) out[n++] = out[lastInvalidPercent + 1];
                out[lastInvalidPercent + 1] = 0x32; // '2'
                out[lastInvalidPercent + 2] = 0x35; // '5'
                out[n++] = lastUnescaped;
              } else if (appendNext) {
                n = length;
              }
            }
          }
        } else {
          // Kept escaped exactly as written (hex case preserved); %00 fails.
          out[n++] = 0x25;
          out[n++] = spec[i - 1];
          out[n++] = spec[i];
          if (vflags === INVALID) success = false;
        }
      } else {
        lastInvalidPercent = n;
        out[n++] = 0x25; // invalid escape: passed through (Chromium's permissive behaviour)
      }
    } else {
      // ESCAPE, or INVALID (NUL), which also fails.
      out[n++] = 0x25;
      out[n++] = HEX.charCodeAt(c >> 4);
      out[n++] = HEX.charCodeAt(c & 0xf);
      if (flags === INVALID) success = false;
    }
  }
  if (!success) return undefined;
  // Every byte above 0x7f was escaped above, so the output is ASCII.
  return asciiString(out, n);
}

/** `%2F`/`%2f` → `/`, `%5C`/`%5c` → `\` (Envoy `UNESCAPE_AND_FORWARD`). */
function unescapeSlashes(path: string): string {
  return path.includes('%') ? path.replace(/%2f/gi, '/').replace(/%5c/gi, '\\') : path;
}

/** Runs of `/` → one `/` (Envoy `merge_slashes`). */
function mergeSlashes(path: string): string {
  return path.includes('//') ? path.replace(/\/{2,}/g, '/') : path;
}

/**
 * Normalize a request target (`:path` as received) per `mode`. The query (from the first `?`) is
 * not normalized; it is dropped from `path` and kept in `forward`. A `#fragment` never reaches a
 * proxy; one that does is percent-encoded by BASE.
 * @returns undefined when the path must be rejected with 400 (Envoy `path_normalization_failed`).
 */
export function normalizeRequestPath(target: string, mode: PathNormalization = 'BASE'): NormalizedPath | undefined {
  const q = target.indexOf('?');
  const rawPath = q < 0 ? target : target.slice(0, q);
  const query = q < 0 ? '' : target.slice(q);
  if (mode === 'NONE') {
    const hash = rawPath.indexOf('#');
    return { path: hash < 0 ? rawPath : rawPath.slice(0, hash), forward: target };
  }
  const decoded = mode === 'DECODE_AND_MERGE_SLASHES' ? unescapeSlashes(rawPath) : rawPath;
  const canonical = canonicalizePath(decoded);
  if (canonical === undefined) return undefined;
  const path = mode === 'BASE' ? canonical : mergeSlashes(canonical);
  return { path, forward: path + query };
}

/**
 * What `paths`/`notPaths` match for an already normalized request target: its path without the
 * query (and without a `#fragment`, which only NONE leaves in place). Nothing is decoded again.
 */
export function matchPath(target: string): string {
  let end = target.indexOf('?');
  if (end < 0) end = target.length;
  const hash = target.indexOf('#');
  if (hash >= 0 && hash < end) end = hash;
  return end === target.length ? target : target.slice(0, end);
}
