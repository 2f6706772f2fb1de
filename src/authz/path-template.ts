/**
 * Path templates in `paths`/`notPaths` (istio/api authorization_policy.proto `Operation.paths`):
 * `{*}` is exactly one non-empty path segment, `{**}` zero or more segments and must be the last
 * operator.
 *
 * Istio turns `{*}`/`{**}` into Envoy's `uri_template` operators `*`/`**` (istio/istio
 * pilot/pkg/security/authz/model/generator.go `pathGenerator`, `matcher.PathTemplateMatcher`) after
 * validating the value (`security.CheckValidPathTemplate`: no named variables, no bare `*`/`**`
 * segments). Envoy then compiles the template to an RE2 regex (envoyproxy/envoy
 * `source/extensions/path/uri_template_lib/uri_template_internal.cc`): literal segments may hold
 * only pchar characters (`a-zA-Z0-9-._~%!$&'()+,;:@`), `*` becomes `[pchar]+`, `**` becomes
 * `[pchar/]*`, segments are joined with `/`, and a trailing text after an operator in the last
 * segment is a suffix. The regex is matched against the whole normalized path.
 */
import { escapeRegex } from './string-match.ts';

const MATCH_ONE = '{*}';
const MATCH_ANY = '{**}';
/** Istio's `unsupportedPathTempRegex`. */
const UNSUPPORTED = /\/{\w+=\*[*]?\}|{\w*\}|\/\*[*]?|\*[*]?\//;
const LITERAL = "a-zA-Z0-9\\-._~%!$&'()+,;:@";
const LITERAL_RE = new RegExp(`^[${LITERAL}]+$`);
const PATH_GLOB = `[${LITERAL}]+`;
const TEXT_GLOB = `[${LITERAL}/]*`;

/** True when a `paths` value is a template (holds `{*}` or `{**}`), Istio `IsPathTemplate`. */
export function isPathTemplate(value: string): boolean {
  return value.includes(MATCH_ONE) || value.includes(MATCH_ANY);
}

/**
 * Compile a template value into an anchored RegExp over the normalized path.
 * @throws Error with the reason when Istio's validation or Envoy's template parser rejects it.
 */
export function compilePathTemplate(value: string): RegExp {
  if (UNSUPPORTED.test(value)) throw new Error(`invalid or unsupported path template ${JSON.stringify(value)}`);
  const pattern = value.replaceAll(MATCH_ANY, '**').replaceAll(MATCH_ONE, '*');
  const bad = (why: string) => new Error(`invalid path template ${JSON.stringify(value)}: ${why}`);
  if (!/^\/[\x21-\x7e]*$/.test(pattern)) throw bad('it must start with / and hold only printable characters');
  const segments: string[] = [];
  let suffix = '';
  let seenTextGlob = false;
  let rest = pattern.slice(1);
  while (rest.length > 0) {
    let consumed: string;
    if (rest.startsWith('**') || rest.startsWith('*')) {
      const text = rest.startsWith('**');
      if (seenTextGlob) throw bad('{**} must be the last operator');
      seenTextGlob = text;
      consumed = text ? '**' : '*';
      segments.push(text ? TEXT_GLOB : PATH_GLOB);
    } else if (rest.startsWith('{')) {
      throw bad('variables are not supported');
    } else {
      const slash = rest.indexOf('/');
      consumed = slash < 0 ? rest : rest.slice(0, slash);
      if (!LITERAL_RE.test(consumed)) throw bad(`${JSON.stringify(consumed)} is not a valid literal segment`);
      segments.push(escapeRegex(consumed));
    }
    rest = rest.slice(consumed.length);
    if (rest === '') break;
    if (rest === '/') {
      segments.push(''); // trailing slash
      break;
    }
    if (rest.startsWith('/')) {
      rest = rest.slice(1);
      continue;
    }
    // Text right after an operator, up to the end: a suffix.
    if (rest.includes('/') || !LITERAL_RE.test(rest)) throw bad(`${JSON.stringify(rest)} is not a valid suffix`);
    suffix = escapeRegex(rest);
    break;
  }
  return new RegExp(`^/${segments.join('/')}${suffix}$`);
}
