/**
 * A fake Kubernetes API server for tests: HTTPS on loopback with a test CA, bearer-token auth, and
 * per resource path the two requests an informer makes, answered as the API server answers them:
 * - list: `{kind: XList, metadata: {resourceVersion}, items}` (items of built-in kinds without
 *   apiVersion/kind, as the real server sends them);
 * - watch (`?watch=true&resourceVersion=N`): a chunked stream of JSON lines, the events after N
 *   replayed from history, then live ADDED/MODIFIED/DELETED, BOOKMARK when asked for
 *   (`allowWatchBookmarks`), and `ERROR` 410 `Expired` for a resourceVersion older than the
 *   history kept ({@link FakeKube.compact}).
 * Tests can forbid a verb (403 with the API server's message), hide a resource (404, as for a
 * CRD not installed), cut the open watches, and read every request made.
 */
import { webcrypto } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type http from 'node:http';
import type net from 'node:net';
import path from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';

export type Doc = Record<string, unknown>;
type Meta = Record<string, unknown>;

const CLUSTER_SCOPED = new Set(['Namespace', 'GatewayClass']);

/** `plural.group` (`plural` for core) of a kind, as the API server names resources. */
export function resourceOf(apiVersion: string, kind: string): string {
  const slash = apiVersion.lastIndexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  const lower = kind.toLowerCase();
  const plural = /[^aeiou]y$/.test(lower) ? `${lower.slice(0, -1)}ies` : lower.endsWith('s') ? `${lower}es` : `${lower}s`;
  return group ? `${plural}.${group}` : plural;
}

/** Built-in groups: their list items carry no apiVersion/kind. */
const builtIn = (group: string) => group === '' || (group.endsWith('.k8s.io') && group !== 'gateway.networking.k8s.io');

let uidCounter = 0;

/**
 * `doc` as the API server serves it at resourceVersion `rv`: namespace defaulted, uid,
 * resourceVersion, creationTimestamp, generation and managedFields set (kept from `previous`).
 */
export function served(doc: Doc, rv: number, previous?: Doc): Doc {
  const out = structuredClone(doc);
  const meta = (out.metadata ?? {}) as Meta;
  const prev = (previous?.metadata ?? {}) as Meta;
  if (!CLUSTER_SCOPED.has(String(out.kind)) && meta.namespace === undefined) meta.namespace = 'default';
  meta.uid = prev.uid ?? `00000000-0000-4000-8000-${String(++uidCounter).padStart(12, '0')}`;
  meta.resourceVersion = String(rv);
  meta.creationTimestamp = prev.creationTimestamp ?? new Date(Date.UTC(2025, 0, 1, 0, 0, uidCounter)).toISOString().replace('.000', '');
  meta.generation = ((prev.generation as number | undefined) ?? 0) + 1;
  meta.managedFields = [{ manager: 'kubectl', operation: 'Apply', apiVersion: out.apiVersion, time: meta.creationTimestamp, fieldsType: 'FieldsV1', fieldsV1: {} }];
  out.metadata = meta;
  return out;
}

interface Event {
  readonly rv: number;
  readonly resource: string;
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED';
  readonly object: Doc;
}

interface Watch {
  readonly resource: string;
  readonly namespace: string | undefined;
  readonly name: string | undefined;
  readonly bookmarks: boolean;
  readonly res: http.ServerResponse;
}

/** One request the fake answered. */
export interface Request {
  readonly verb: 'list' | 'watch';
  readonly resource: string;
  readonly path: string;
  readonly query: URLSearchParams;
  readonly status: number;
}

/** Where a request path points: the resource, and the namespace when the path names one. */
function route(pathname: string): { resource: string; namespace?: string } | undefined {
  const parts = pathname.split('/').filter(Boolean);
  let group: string;
  let rest: string[];
  if (parts[0] === 'api' && parts[1] === 'v1') [group, rest] = ['', parts.slice(2)];
  else if (parts[0] === 'apis' && parts.length >= 4) [group, rest] = [parts[1], parts.slice(3)];
  else return undefined;
  const name = (plural: string) => (group ? `${plural}.${group}` : plural);
  if (rest.length === 1) return { resource: name(rest[0]) };
  if (rest.length === 3 && rest[0] === 'namespaces') return { resource: name(rest[2]), namespace: decodeURIComponent(rest[1]) };
  return undefined;
}

export class FakeKube {
  readonly host: string;
  readonly token: string;
  readonly caPem: string;
  readonly requests: Request[] = [];
  readonly #server: https.Server;
  readonly #sockets = new Set<net.Socket>();
  readonly #objects = new Map<string, Map<string, Doc>>();
  readonly #history: Event[] = [];
  readonly #watches = new Set<Watch>();
  readonly #forbidden = new Set<string>();
  readonly #hidden = new Set<string>();
  #rv = 1000;
  /** Watches from a resourceVersion below this get 410 Gone. */
  #compactedRv = 0;

  private constructor(host: string, token: string, caPem: string, server: https.Server) {
    this.host = host;
    this.token = token;
    this.caPem = caPem;
    this.#server = server;
    server.on('connection', (s: net.Socket) => {
      this.#sockets.add(s);
      s.on('close', () => this.#sockets.delete(s));
    });
    server.on('request', (req, res) => this.#answer(req, res));
  }

  /** Start on `host` (an address of the test's own range), port chosen by the system. */
  static async start(host: string, token = 'test-token'): Promise<FakeKube> {
    const tls = await serverCertificate(host);
    const server = https.createServer({ key: tls.keyPem, cert: tls.certPem });
    const kube = new FakeKube(host, token, tls.caPem, server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => resolve());
    });
    return kube;
  }

  get url(): string {
    return `https://${this.host}:${(this.#server.address() as net.AddressInfo).port}`;
  }

  /** Write a kubeconfig for this server (its CA, a bearer token) into `dir`; returns its path. */
  kubeconfig(dir: string): string {
    const file = path.join(dir, 'kubeconfig');
    const ca = Buffer.from(this.caPem).toString('base64');
    fs.writeFileSync(
      file,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        `- name: fake\n  cluster:\n    server: ${this.url}\n    certificate-authority-data: ${ca}`,
        'users:',
        `- name: waypoint\n  user:\n    token: ${this.token}`,
        'contexts:',
        '- name: fake\n  context:\n    cluster: fake\n    user: waypoint',
        'current-context: fake',
        '',
      ].join('\n'),
    );
    return file;
  }

  /** Create or replace an object (ADDED or MODIFIED to the watches); returns it as served. */
  apply(doc: Doc): Doc {
    const resource = resourceOf(String(doc.apiVersion), String(doc.kind));
    let store = this.#objects.get(resource);
    if (!store) this.#objects.set(resource, (store = new Map()));
    const meta = doc.metadata as Meta;
    const key = `${CLUSTER_SCOPED.has(String(doc.kind)) ? '' : String(meta.namespace ?? 'default')}/${String(meta.name)}`;
    const previous = store.get(key);
    const object = served(doc, ++this.#rv, previous);
    store.set(key, object);
    this.#record({ rv: this.#rv, resource, type: previous ? 'MODIFIED' : 'ADDED', object });
    return object;
  }

  /** Delete an object (DELETED to the watches, at a new resourceVersion). */
  remove(doc: Doc): void {
    const resource = resourceOf(String(doc.apiVersion), String(doc.kind));
    const meta = doc.metadata as Meta;
    const key = `${CLUSTER_SCOPED.has(String(doc.kind)) ? '' : String(meta.namespace ?? 'default')}/${String(meta.name)}`;
    const previous = this.#objects.get(resource)?.get(key);
    if (!previous) throw new Error(`fake kube: no ${resource} ${key} to delete`);
    this.#objects.get(resource)!.delete(key);
    const object = structuredClone(previous);
    (object.metadata as Meta).resourceVersion = String(++this.#rv);
    this.#record({ rv: this.#rv, resource, type: 'DELETED', object });
  }

  /** Send a BOOKMARK (the current resourceVersion) to every watch that asked for bookmarks. */
  bookmark(): void {
    for (const w of this.#watches) {
      if (w.bookmarks) w.res.write(`${JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: String(this.#rv) } } })}\n`);
    }
  }

  /** Cut every open watch connection (a dropped connection, not a clean end). */
  dropWatches(): void {
    for (const w of this.#watches) w.res.socket?.destroy();
    this.#watches.clear();
  }

  /** Forget the history: a watch from any resourceVersion before now gets `410 Gone`. */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history.length = 0;
  }

  /** Answer `verb` on `resource` (`plural.group`) with 403 Forbidden (or stop, with `on: false`). */
  forbid(resource: string, verb: 'list' | 'watch', on = true): void {
    if (on) this.#forbidden.add(`${verb} ${resource}`);
    else this.#forbidden.delete(`${verb} ${resource}`);
  }

  /** Answer every request on `resource` with 404, as for a CRD not installed (or stop, with `on: false`). */
  hide(resource: string, on = true): void {
    if (on) this.#hidden.add(resource);
    else this.#hidden.delete(resource);
  }

  /** Open watches (of `resource`, or all). */
  openWatches(resource?: string): number {
    return [...this.#watches].filter((w) => resource === undefined || w.resource === resource).length;
  }

  /** Requests made so far for `resource` with `verb`. */
  requestsFor(resource: string, verb: 'list' | 'watch'): Request[] {
    return this.requests.filter((r) => r.resource === resource && r.verb === verb);
  }

  async close(): Promise<void> {
    for (const w of this.#watches) w.res.destroy();
    this.#watches.clear();
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }

  #record(event: Event): void {
    this.#history.push(event);
    for (const w of this.#watches) if (matches(w, event)) send(w.res, event.type, event.object);
  }

  #answer(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'https://fake');
    const where = route(url.pathname);
    const watch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    const verb = watch ? 'watch' : 'list';
    const fail = (status: number, reason: string, message: string) => {
      this.requests.push({ verb, resource: where?.resource ?? url.pathname, path: url.pathname, query: url.searchParams, status });
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code: status }));
    };
    if (req.headers.authorization !== `Bearer ${this.token}`) return fail(401, 'Unauthorized', 'Unauthorized');
    if (!where || req.method !== 'GET' || this.#hidden.has(where.resource)) {
      this.requests.push({ verb, resource: where?.resource ?? url.pathname, path: url.pathname, query: url.searchParams, status: 404 });
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
      return void res.end('404 page not found\n');
    }
    const { resource, namespace } = where;
    if (this.#forbidden.has(`${verb} ${resource}`)) {
      const [plural, ...group] = resource.split('.');
      const scope = namespace ? `in the namespace "${namespace}"` : 'at the cluster scope';
      return fail(403, 'Forbidden', `${resource} is forbidden: User "system:serviceaccount:demo:waypoint" cannot ${verb} resource "${plural}" in API group "${group.join('.')}" ${scope}`);
    }
    this.requests.push({ verb, resource, path: url.pathname, query: url.searchParams, status: 200 });
    const name = /^metadata\.name=(.+)$/.exec(url.searchParams.get('fieldSelector') ?? '')?.[1];
    const current = [...(this.#objects.get(resource)?.values() ?? [])].filter((o) => matches({ namespace, name }, { object: o }));
    if (!watch) {
      const group = resource.includes('.') ? resource.slice(resource.indexOf('.') + 1) : '';
      const items = current.map((o) => (builtIn(group) ? Object.fromEntries(Object.entries(o).filter(([k]) => k !== 'apiVersion' && k !== 'kind')) : o));
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ kind: 'List', apiVersion: 'v1', metadata: { resourceVersion: String(this.#rv) }, items }));
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.flushHeaders();
    const from = Number(url.searchParams.get('resourceVersion') || '0');
    if (from !== 0 && from < this.#compactedRv) {
      const status = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: `too old resource version: ${from} (${this.#compactedRv})`, reason: 'Expired', code: 410 };
      res.write(`${JSON.stringify({ type: 'ERROR', object: status })}\n`);
      return void res.end();
    }
    const w: Watch = { resource, namespace, name, bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true', res };
    if (from === 0) for (const o of current) send(res, 'ADDED', o);
    else for (const e of this.#history) if (e.rv > from && e.resource === resource && matches(w, e)) send(res, e.type, e.object);
    this.#watches.add(w);
    res.on('close', () => this.#watches.delete(w));
  }
}

function matches(w: { namespace?: string; name?: string; resource?: string }, e: { resource?: string; object: Doc }): boolean {
  const meta = e.object.metadata as Meta;
  if (w.resource !== undefined && e.resource !== undefined && w.resource !== e.resource) return false;
  if (w.namespace !== undefined && meta.namespace !== w.namespace) return false;
  return w.name === undefined || meta.name === w.name;
}

function send(res: http.ServerResponse, type: string, object: Doc): void {
  res.write(`${JSON.stringify({ type, object })}\n`);
}

const P256 = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A test CA and a serving certificate for IP `host` signed by it. */
async function serverCertificate(host: string): Promise<{ caPem: string; certPem: string; keyPem: string }> {
  const caKeys = (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const now = Date.now();
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=fake-kube-ca',
    keys: caKeys,
    signingAlgorithm: P256,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 3600_000),
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)],
  });
  const keys = (await webcrypto.subtle.generateKey(P256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.create({
    issuer: ca.subject,
    subject: 'CN=kube-apiserver',
    publicKey: keys.publicKey,
    signingKey: caKeys.privateKey,
    signingAlgorithm: P256,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + 3600_000),
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: host }]),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  const keyPem = `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)!.join('\n')}\n-----END PRIVATE KEY-----\n`;
  return { caPem: ca.toString('pem'), certPem: cert.toString('pem'), keyPem };
}
