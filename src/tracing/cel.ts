/**
 * The subset of CEL (Common Expression Language) that Istio's Telemetry API documents for
 * `accessLogging[].filter.expression` and `metrics[].overrides[].tagOverrides[].value`
 * (istio.io docs tasks/observability/logs/telemetry-api "response.code >= 400"; Telemetry API
 * reference `AccessLogging.Filter` "connection.mtls && request.url_path.contains('v1beta3')";
 * tasks/observability/metrics/customize-metrics `request.host`, `string(destination.port)`),
 * over Envoy's request attributes (envoyproxy/envoy docs intro/arch_overview/advanced/attributes).
 *
 * Grammar: literals (integers, 'strings' / "strings", true, false), attributes (cel-attributes.ts,
 * `request.headers['name']`), `==` `!=` `<` `<=` `>` `>=` between values of one type, `!`, `&&`,
 * `||`, parentheses, the string methods `startsWith`/`endsWith`/`contains`, and `has(attribute)`,
 * `string(int)`. Types are checked when compiled; anything else is refused with what is supported,
 * never evaluated loosely. Evaluation follows CEL: a missing attribute or header is an error, which
 * `&&`/`||` absorb when the other side decides (`false && error` is false).
 */
import type { ConnectionContext, StreamContext } from '../pipeline/index.ts';
import { ATTRIBUTES, CEL_ERROR, type AttributeType, type CelValue, headerOf } from './cel-attributes.ts';

export { CEL_ERROR, type CelValue } from './cel-attributes.ts';

type Type = AttributeType | 'map';
type Eval = (conn: ConnectionContext, stream: StreamContext | undefined) => CelValue;
interface Node {
  readonly type: Type;
  readonly eval: Eval;
  /** Attributes only: `has(...)` asks whether it evaluates without error. */
  readonly attribute?: boolean;
}

/** A compiled expression. */
export interface CelExpression {
  readonly text: string;
  readonly type: AttributeType;
  evaluate(conn: ConnectionContext, stream: StreamContext | undefined): CelValue;
}

const SUPPORTED =
  "supported: integer and 'string' literals, true/false, the attributes request.{method,host,path,url_path,scheme,protocol,useragent,id,size,headers['name']}, response.{code,code_details,grpc_status,size}, " +
  "source.{address,port}, destination.{address,port}, upstream.{address,port}, connection.{mtls,requested_server_name,id}, xds.{cluster_name,route_name}; == != < <= > >= ! && || ( ); .startsWith() .endsWith() .contains(); has(); string()";

/** A refused expression: what is wrong and where. */
export class CelCompileError extends Error {}

const TOKENS = /\s*(?:(\d+)|'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|([A-Za-z_][A-Za-z0-9_]*)|(==|!=|<=|>=|&&|\|\||[<>!().[\],]))/y;

type Token = { readonly kind: 'int' | 'string' | 'ident' | 'op'; readonly text: string; readonly at: number };

function tokenize(text: string): Token[] {
  const out: Token[] = [];
  TOKENS.lastIndex = 0;
  while (TOKENS.lastIndex < text.length) {
    const at = TOKENS.lastIndex;
    if (/^\s*$/.test(text.slice(at))) break;
    const m = TOKENS.exec(text);
    if (!m) throw new CelCompileError(`unsupported CEL at column ${at + 1}: ${JSON.stringify(text.slice(at).trim().slice(0, 20))} (${SUPPORTED})`);
    const start = m.index + m[0].length - m[0].trimStart().length;
    if (m[1] !== undefined) out.push({ kind: 'int', text: m[1], at: start });
    else if (m[2] !== undefined || m[3] !== undefined) out.push({ kind: 'string', text: unescape(m[2] ?? m[3]), at: start });
    else if (m[4] !== undefined) out.push({ kind: 'ident', text: m[4], at: start });
    else out.push({ kind: 'op', text: m[5], at: start });
  }
  return out;
}

function unescape(s: string): string {
  return s.replace(/\\(.)/g, (_, c: string) => ({ n: '\n', t: '\t', r: '\r' })[c] ?? c);
}

class Parser {
  private i = 0;
  private readonly tokens: Token[];
  private readonly text: string;
  constructor(tokens: Token[], text: string) {
    this.tokens = tokens;
    this.text = text;
  }

  private peek(): Token | undefined {
    return this.tokens[this.i];
  }
  private fail(what: string, t: Token | undefined = this.peek()): never {
    throw new CelCompileError(`${what} at ${t ? `column ${t.at + 1} (${JSON.stringify(t.text)})` : 'the end'} (${SUPPORTED})`);
  }
  private accept(op: string): boolean {
    const t = this.peek();
    if (t?.kind === 'op' && t.text === op) {
      this.i++;
      return true;
    }
    return false;
  }
  private expect(op: string): void {
    if (!this.accept(op)) this.fail(`expected ${op}`);
  }

  parse(): Node {
    const n = this.or();
    if (this.i < this.tokens.length) this.fail('unexpected token');
    return n;
  }

  private or(): Node {
    let left = this.and();
    while (this.accept('||')) left = logical(left, this.and(), true, this.text);
    return left;
  }
  private and(): Node {
    let left = this.unary();
    while (this.accept('&&')) left = logical(left, this.unary(), false, this.text);
    return left;
  }
  private unary(): Node {
    if (this.accept('!')) {
      const n = this.unary();
      if (n.type !== 'bool') throw new CelCompileError(`! needs a bool, got ${n.type} in ${JSON.stringify(this.text)}`);
      return { type: 'bool', eval: (c, s) => negate(n.eval(c, s)) };
    }
    return this.comparison();
  }
  private comparison(): Node {
    const left = this.member();
    const t = this.peek();
    if (t?.kind !== 'op' || !['==', '!=', '<', '<=', '>', '>='].includes(t.text)) return left;
    this.i++;
    const right = this.member();
    if (left.type !== right.type || left.type === 'map') throw new CelCompileError(`${t.text} compares ${left.type} with ${right.type} in ${JSON.stringify(this.text)}`);
    if (left.type === 'bool' && t.text !== '==' && t.text !== '!=') throw new CelCompileError(`${t.text} does not order bools in ${JSON.stringify(this.text)}`);
    return { type: 'bool', eval: compare(t.text, left.eval, right.eval) };
  }
  private member(): Node {
    let n = this.primary();
    while (this.peek()?.kind === 'op' && this.peek()!.text === '.') {
      this.i++;
      const m = this.peek();
      if (m?.kind !== 'ident' || !['startsWith', 'endsWith', 'contains'].includes(m.text)) this.fail('unsupported member');
      this.i++;
      this.expect('(');
      const arg = this.or();
      this.expect(')');
      if (n.type !== 'string' || arg.type !== 'string') throw new CelCompileError(`${m.text}() needs strings in ${JSON.stringify(this.text)}`);
      n = { type: 'bool', eval: stringMethod(m.text, n.eval, arg.eval) };
    }
    return n;
  }
  private primary(): Node {
    const t = this.peek();
    if (!t) this.fail('expression ends early');
    this.i++;
    if (t.kind === 'int') return constant('int', Number(t.text));
    if (t.kind === 'string') return constant('string', t.text);
    if (t.kind === 'op' && t.text === '(') {
      const n = this.or();
      this.expect(')');
      return n;
    }
    if (t.kind !== 'ident') this.fail('unexpected token', t);
    if (t.text === 'true' || t.text === 'false') return constant('bool', t.text === 'true');
    if ((t.text === 'has' || t.text === 'string') && this.accept('(')) {
      const arg = this.or();
      this.expect(')');
      if (t.text === 'has') {
        if (!arg.attribute) throw new CelCompileError(`has() takes an attribute in ${JSON.stringify(this.text)}`);
        return { type: 'bool', eval: (c, s) => arg.eval(c, s) !== CEL_ERROR };
      }
      if (arg.type !== 'int' && arg.type !== 'string') throw new CelCompileError(`string() takes an int or a string in ${JSON.stringify(this.text)}`);
      return { type: 'string', eval: (c, s) => toStr(arg.eval(c, s)) };
    }
    // size(x), duration('2s'), ...: a call, not a misspelled attribute.
    if (this.peek()?.kind === 'op' && this.peek()!.text === '(') this.fail(`unsupported function ${t.text}() (supported: has(), string(), and the methods startsWith(), endsWith(), contains())`, t);
    return this.attribute(t);
  }
  private attribute(first: Token): Node {
    let name = first.text;
    while (this.peek()?.kind === 'op' && this.peek()!.text === '.' && this.tokens[this.i + 1]?.kind === 'ident' && ATTRIBUTES.has(`${name}.${this.tokens[this.i + 1].text}`)) {
      name = `${name}.${this.tokens[this.i + 1].text}`;
      this.i += 2;
    }
    if (name === 'request.headers') {
      this.expect('[');
      const key = this.peek();
      if (key?.kind !== 'string') this.fail("expected a 'header name'");
      this.i++;
      this.expect(']');
      const header = key.text.toLowerCase();
      return { type: 'string', attribute: true, eval: (_c, s) => headerOf(s, header) };
    }
    const a = ATTRIBUTES.get(name);
    if (!a) {
      let shown = name;
      for (let j = this.i; this.tokens[j]?.text === '.' && this.tokens[j + 1]?.kind === 'ident'; j += 2) shown += `.${this.tokens[j + 1].text}`;
      this.fail(`unknown attribute ${shown}`, first);
    }
    return { type: a.type, attribute: true, eval: a.read };
  }
}

function constant(type: AttributeType, v: string | number | boolean): Node {
  return { type, eval: () => v };
}

function negate(v: CelValue): CelValue {
  return v === CEL_ERROR ? v : !v;
}

function toStr(v: CelValue): CelValue {
  return v === CEL_ERROR ? v : String(v);
}

function logical(l: Node, r: Node, or: boolean, text: string): Node {
  if (l.type !== 'bool' || r.type !== 'bool') throw new CelCompileError(`${or ? '||' : '&&'} needs bools in ${JSON.stringify(text)}`);
  return {
    type: 'bool',
    eval: (c, s) => {
      const a = l.eval(c, s);
      if (a === or) return a; // decided: true || _, false && _
      const b = r.eval(c, s);
      if (b === or) return b;
      return a === CEL_ERROR || b === CEL_ERROR ? CEL_ERROR : !or;
    },
  };
}

function compare(op: string, l: Eval, r: Eval): Eval {
  return (c, s) => {
    const a = l(c, s);
    const b = r(c, s);
    if (a === CEL_ERROR || b === CEL_ERROR) return CEL_ERROR;
    switch (op) {
      case '==':
        return a === b;
      case '!=':
        return a !== b;
      case '<':
        return a < b;
      case '<=':
        return a <= b;
      case '>':
        return a > b;
      default:
        return a >= b;
    }
  };
}

function stringMethod(name: string, target: Eval, arg: Eval): Eval {
  return (c, s) => {
    const a = target(c, s);
    const b = arg(c, s);
    if (a === CEL_ERROR || b === CEL_ERROR) return CEL_ERROR;
    const x = a as string;
    const y = b as string;
    return name === 'startsWith' ? x.startsWith(y) : name === 'endsWith' ? x.endsWith(y) : x.includes(y);
  };
}

/**
 * Compile `text`, requiring a result of one of `types` (a filter needs `bool`, a tag value `string`
 * or `int`). @throws CelCompileError naming what is not supported or mistyped.
 */
export function compileCel(text: string, types: readonly AttributeType[]): CelExpression {
  const trimmed = text.trim();
  if (trimmed === '') throw new CelCompileError('empty expression');
  const node = new Parser(tokenize(trimmed), trimmed).parse();
  if (node.type === 'map' || !types.includes(node.type)) {
    throw new CelCompileError(`${JSON.stringify(trimmed)} is a ${node.type}; this field needs ${types.join(' or ')}`);
  }
  return Object.freeze({ text: trimmed, type: node.type, evaluate: node.eval });
}
