/**
 * Contexts and recording filters for pipeline unit tests: contexts come from the filter harness
 * (test/helpers/filter-harness.ts); tests that hand-build a request pass it to {@link fakeStream}.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { admitRequest, requestHead } from '../../../src/inner-http/index.ts';
import {
  FilterStatus,
  HeaderList,
  StreamContext,
  sendLocalReply,
  type ConnectInfo,
  type ConnectionContext,
  type Filter,
  type FilterChain,
  type PhaseResult,
  type RequestHead,
  type TerminalFilter,
} from '../../../src/pipeline/index.ts';
import { CLIENT_INFO, FilterHarness } from '../../helpers/filter-harness.ts';

/** The default tunnel of the filter harness: `demo/client` to Service `demo/echo`. */
export const INFO: ConnectInfo = CLIENT_INFO;

/** A tunnel over the filter harness's default mesh. */
export function fakeConnection(): ConnectionContext {
  return new FilterHarness([]).connection();
}

/**
 * A stream on `chain`: without `req`, a GET / over Node's own request and response objects (the
 * filter harness); with `req`, over that request (a real one, or a stand-in whose head is read as
 * the connection manager reads it, see {@link headOf}).
 */
export function fakeStream(chain: FilterChain, req?: IncomingMessage, res?: ServerResponse, conn: ConnectionContext = fakeConnection()): StreamContext {
  if (!req) return new FilterHarness(chain).stream(conn);
  return new StreamContext(conn, chain, req, res ?? ({} as ServerResponse), headOf(req));
}

/** The request head of a real request or a stand-in (see {@link fakeStream}). */
export function headOf(req: IncomingMessage): RequestHead {
  if (Array.isArray(req.rawHeaders)) return requestHead(req);
  const raw: string[] = [];
  for (const [n, v] of Object.entries(req.headers ?? {})) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) raw.push(n, String(one));
  }
  const h2 = req.httpVersion === '2.0';
  const host = req.headers?.host;
  return {
    protocol: h2 ? 'HTTP/2' : req.httpVersion === '1.0' ? 'HTTP/1.0' : 'HTTP/1.1',
    method: req.method ?? 'GET',
    path: req.url ?? '/',
    authority: (h2 ? (req as unknown as { authority?: string }).authority : typeof host === 'string' ? host : undefined) ?? '',
    headers: new HeaderList(raw),
  };
}

export type PhaseName =
  | 'onConnection'
  | 'onRequestHeaders'
  | 'onUpstreamRequest'
  | 'onResponseHeaders'
  | 'onStreamComplete'
  | 'onConnectionComplete';

export const ALL_PHASES: readonly PhaseName[] = [
  'onConnection',
  'onRequestHeaders',
  'onUpstreamRequest',
  'onResponseHeaders',
  'onStreamComplete',
  'onConnectionComplete',
];

/** What a request phase of a recording filter does (default: Continue synchronously). */
export type Behaviour = 'continue' | 'stop' | 'async-continue' | 'async-stop' | 'throw' | 'reject';

/**
 * A filter implementing exactly `phases`, pushing `name.phase` to `calls` on each call. Request
 * phases (`onConnection`, `onRequestHeaders`) act as `behave[phase]` says; the other phases throw
 * when `behave[phase]` is `throw`.
 */
export function recorder(
  name: string,
  calls: string[],
  phases: readonly PhaseName[] = ALL_PHASES,
  behave: Partial<Record<PhaseName, Behaviour>> = {},
): Filter {
  const f: Record<string, unknown> = { name };
  for (const p of phases) {
    f[p] = (..._args: unknown[]): PhaseResult | void => {
      calls.push(`${name}.${p}`);
      const b = behave[p] ?? 'continue';
      switch (b) {
        case 'continue':
          return p === 'onConnection' || p === 'onRequestHeaders' ? FilterStatus.Continue : undefined;
        case 'stop':
          return FilterStatus.StopAndReply;
        case 'throw':
          throw new Error(`${name} ${p} failed`);
        case 'async-continue':
          return new Promise((r) => setTimeout(() => r(FilterStatus.Continue), 5));
        case 'async-stop':
          return new Promise((r) => setTimeout(() => r(FilterStatus.StopAndReply), 5));
        case 'reject':
          return new Promise((_r, j) => setTimeout(() => j(new Error(`${name} ${p} rejected`)), 5));
      }
    };
  }
  return f as unknown as Filter;
}

/** A terminal filter (has `forward`) that records like {@link recorder}. */
export function terminal(name: string, calls: string[], phases: readonly PhaseName[] = ALL_PHASES): TerminalFilter {
  const f = recorder(name, calls, phases) as TerminalFilter & { forward(s: StreamContext): void };
  (f as { forward: (s: StreamContext) => void }).forward = () => {
    calls.push(`${name}.forward`);
  };
  return f;
}

/** Run one phase of `chain` the way the data path does. */
export function runPhase(chain: FilterChain, phase: PhaseName, stream: StreamContext, headers: HeaderList): unknown {
  switch (phase) {
    case 'onConnection':
      return chain.runConnection(stream.conn);
    case 'onRequestHeaders':
      return chain.runRequestHeaders(stream);
    case 'onUpstreamRequest':
      return chain.runUpstreamRequest(stream, headers);
    case 'onResponseHeaders':
      return chain.runResponseHeaders(stream, headers);
    case 'onStreamComplete':
      return chain.completeStream(stream);
    case 'onConnectionComplete':
      return chain.completeConnection(stream.conn);
  }
}

/**
 * The request phase as the data path runs it: the connection manager's checks first (a refusal
 * is answered and reported as StopAndReply), then the chain's `onRequestHeaders`.
 */
export async function admitAndRun(chain: FilterChain, stream: StreamContext): Promise<FilterStatus> {
  const refused = admitRequest(stream, { rejectHttp10: false });
  if (refused) {
    sendLocalReply(stream, refused.status, refused.body, refused.flag, refused.details);
    return FilterStatus.StopAndReply;
  }
  return chain.runRequestHeaders(stream);
}
