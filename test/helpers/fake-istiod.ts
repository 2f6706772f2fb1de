/**
 * A fake istiod for tests: a real @grpc/grpc-js server over TLS (serving certificate for
 * `istiod.istio-system.svc`, signed by an intermediate of a test root: {@link IstiodPki}) speaking
 * the project's own message declarations (src/istiod), with:
 * - the CA, `istio.v1.auth.IstioCertificateService/CreateCertificate`: checks the bearer token,
 *   signs the CSR with the intermediate, answers `[leaf, intermediate, root]`; every call is
 *   recorded ({@link FakeIstiod.caCalls}); {@link FakeIstiod.failCa} makes the next calls fail;
 * - delta ADS, `envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources`:
 *   holds a set of `istio.workload.Address` resources; a new stream gets every resource whose
 *   version differs from its `initial_resource_versions` (and `removed_resources` for names it
 *   holds that are gone), as istiod answers a wildcard subscription; {@link FakeIstiod.push}
 *   changes resources and pushes the change to every stream; every request (initial, ACK, NACK)
 *   is recorded per stream ({@link FakeIstiod.streams}); {@link FakeIstiod.dropStreams} ends the
 *   streams (UNAVAILABLE) with the server still up; {@link FakeIstiod.stop} / {@link FakeIstiod.restart}
 *   take it away and bring it back on the same address.
 *
 *   const pki = await IstiodPki.create();
 *   const istiod = await FakeIstiod.start({ pki, host: '127.0.71.1', token: 'tok' });
 *   istiod.push({ resources: [wdsWorkload({ uid: 'Kubernetes//Pod/ns/a', ... })] });
 *   // client: address istiod.address, root file pki.rootCertFile, token file containing 'tok'
 *   await istiod.waitFor(() => istiod.streams[0]?.acks.length === 1);
 *   await istiod.stop(); pki.close();
 */
import { create, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import * as grpc from '@grpc/grpc-js';
import { wdsProto, xdsProto } from '../../src/istiod/index.ts';
import type { IstiodPki } from './istiod-pki.ts';

type Request = xdsProto.DeltaDiscoveryRequest;
type Response = xdsProto.DeltaDiscoveryResponse;
type AddressInit = MessageInitShape<typeof wdsProto.AddressSchema>;

/** One resource to push: an Address, or raw `Any` bytes (for resources that must not decode). */
export interface PushedResource {
  readonly name: string;
  /** Default: a counter. */
  readonly version?: string;
  readonly address?: AddressInit;
  /** Sent as the Any's value instead of an encoded `address` (with `typeUrl`, default the Address type). */
  readonly raw?: { readonly value: Uint8Array; readonly typeUrl?: string };
}

/** A Workload resource named by its uid. */
export function wdsWorkload(w: MessageInitShape<typeof wdsProto.WorkloadSchema> & { uid: string }, version?: string): PushedResource {
  return { name: w.uid, version, address: { type: { case: 'workload', value: w } } };
}

/** A Service resource named `namespace/hostname`. */
export function wdsService(s: MessageInitShape<typeof wdsProto.ServiceSchema> & { namespace: string; hostname: string }, version?: string): PushedResource {
  return { name: `${s.namespace}/${s.hostname}`, version, address: { type: { case: 'service', value: s } } };
}

/** 4 or 16 raw bytes of an IP literal. */
export function ipBytes(ip: string): Uint8Array {
  if (!ip.includes(':')) return new Uint8Array(ip.split('.').map(Number));
  // An embedded IPv4 tail (`::ffff:10.0.0.1`) is two groups.
  ip = ip.replace(/(\d+)\.(\d+)\.(\d+)\.(\d+)$/, (_m, a, b, c, d) => `${((+a << 8) | +b).toString(16)}:${((+c << 8) | +d).toString(16)}`);
  const [head, tail = ''] = ip.split('::');
  const parts = (s: string) => (s ? s.split(':') : []);
  const h = parts(head);
  const t = parts(tail);
  const groups = [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  return new Uint8Array(groups.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 0xff]));
}

/** What one CreateCertificate call carried. */
export interface CaCall {
  readonly authorization: string | undefined;
  readonly clusterId: string | undefined;
  readonly csrPem: string;
  readonly validitySeconds: number;
}

/** One ADS stream as the fake saw it. */
export class AdsStream {
  readonly requests: Request[] = [];
  readonly authorization: string | undefined;
  readonly call: grpc.ServerDuplexStream<Request, Response>;
  ended = false;
  constructor(call: grpc.ServerDuplexStream<Request, Response>) {
    this.call = call;
    this.authorization = call.metadata.get('authorization')[0]?.toString();
  }
  get initial(): Request | undefined {
    return this.requests[0];
  }
  /** Requests answering a response (ACKs and NACKs), in order. */
  get acks(): Request[] {
    return this.requests.filter((r) => r.responseNonce !== '');
  }
}

export interface FakeIstiodOptions {
  readonly pki: IstiodPki;
  /** IP to bind (port `port`, default 0 = any free port). */
  readonly host: string;
  readonly port?: number;
  /** Bearer token the CA and ADS accept; undefined = any. */
  readonly token?: string;
  /** Largest certificate lifetime the CA grants (istiod's `MAX_WORKLOAD_CERT_TTL`), seconds. */
  readonly maxTtlSeconds?: number;
}

export class FakeIstiod {
  readonly pki: IstiodPki;
  readonly caCalls: CaCall[] = [];
  readonly streams: AdsStream[] = [];
  /** The resources held, by name. */
  readonly resources = new Map<string, xdsProto.Resource>();
  /** Identity rewrite for issued leaves (a misbehaving CA), or undefined. */
  issueAs: ((uri: string) => string) | undefined;
  /** Bearer token accepted (undefined = any); may change while running (a rotated token). */
  token: string | undefined;
  readonly #opts: FakeIstiodOptions;
  #server: grpc.Server | undefined;
  #port = 0;
  #nonce = 0;
  #version = 0;
  #caFailures: { count: number; code: grpc.status } = { count: 0, code: grpc.status.UNAVAILABLE };

  private constructor(opts: FakeIstiodOptions) {
    this.#opts = opts;
    this.pki = opts.pki;
    this.token = opts.token;
  }

  static async start(opts: FakeIstiodOptions): Promise<FakeIstiod> {
    const f = new FakeIstiod(opts);
    await f.#listen(opts.port ?? 0);
    return f;
  }

  /** `host:port` to give the client. */
  get address(): string {
    return `${this.#opts.host}:${this.#port}`;
  }

  /** The next `count` CreateCertificate calls fail with `code`. */
  failCa(count: number, code = grpc.status.UNAVAILABLE): void {
    this.#caFailures = { count, code };
  }

  /** Change resources (and remove names), then send the change to every open stream; returns the nonce. */
  push(change: { resources?: readonly PushedResource[]; removed?: readonly string[] }): string {
    const resources = (change.resources ?? []).map((r) => this.#resource(r));
    for (const r of resources) this.resources.set(r.name, r);
    for (const name of change.removed ?? []) this.resources.delete(name);
    const nonce = `n${++this.#nonce}`;
    for (const s of this.streams) {
      if (!s.ended) s.call.write(create(xdsProto.DeltaDiscoveryResponseSchema, { typeUrl: wdsProto.ADDRESS_TYPE_URL, nonce, resources, removedResources: [...(change.removed ?? [])] }));
    }
    return nonce;
  }

  /** End every open ADS stream with UNAVAILABLE; the server stays up. */
  dropStreams(): void {
    for (const s of this.streams) {
      if (s.ended) continue;
      s.ended = true;
      s.call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'fake istiod dropped the stream' });
    }
  }

  /** Wait until `cond()` holds (polling), or throw after `ms`. */
  async waitFor(cond: () => boolean, ms = 10_000, what = 'condition'): Promise<void> {
    const end = Date.now() + ms;
    while (!cond()) {
      if (Date.now() > end) throw new Error(`fake istiod: timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Stop the server (open streams end). */
  async stop(): Promise<void> {
    for (const s of this.streams) s.ended = true;
    this.#server?.forceShutdown();
    this.#server = undefined;
  }

  /** Listen again on the same address. */
  async restart(): Promise<void> {
    await this.#listen(this.#port);
  }

  #resource(r: PushedResource): xdsProto.Resource {
    const any = r.raw
      ? { typeUrl: r.raw.typeUrl ?? wdsProto.ADDRESS_TYPE_URL, value: r.raw.value }
      : anyPack(wdsProto.AddressSchema, create(wdsProto.AddressSchema, r.address!));
    return create(xdsProto.ResourceSchema, { name: r.name, version: r.version ?? `v${++this.#version}`, resource: any });
  }

  #authorized(md: grpc.Metadata): boolean {
    return this.token === undefined || md.get('authorization')[0]?.toString() === `Bearer ${this.token}`;
  }

  async #listen(port: number): Promise<void> {
    const server = new grpc.Server();
    server.addService(
      {
        CreateCertificate: {
          path: xdsProto.CREATE_CERTIFICATE_METHOD,
          requestStream: false,
          responseStream: false,
          requestSerialize: (m: xdsProto.IstioCertificateRequest) => Buffer.from(toBinary(xdsProto.IstioCertificateRequestSchema, m)),
          requestDeserialize: (b: Buffer) => fromBinary(xdsProto.IstioCertificateRequestSchema, b),
          responseSerialize: (m: xdsProto.IstioCertificateResponse) => Buffer.from(toBinary(xdsProto.IstioCertificateResponseSchema, m)),
          responseDeserialize: (b: Buffer) => fromBinary(xdsProto.IstioCertificateResponseSchema, b),
        },
        DeltaAggregatedResources: {
          path: xdsProto.DELTA_ADS_METHOD,
          requestStream: true,
          responseStream: true,
          requestSerialize: (m: Request) => Buffer.from(toBinary(xdsProto.DeltaDiscoveryRequestSchema, m)),
          requestDeserialize: (b: Buffer) => fromBinary(xdsProto.DeltaDiscoveryRequestSchema, b),
          responseSerialize: (m: Response) => Buffer.from(toBinary(xdsProto.DeltaDiscoveryResponseSchema, m)),
          responseDeserialize: (b: Buffer) => fromBinary(xdsProto.DeltaDiscoveryResponseSchema, b),
        },
      },
      {
        CreateCertificate: (call: grpc.ServerUnaryCall<xdsProto.IstioCertificateRequest, xdsProto.IstioCertificateResponse>, done: grpc.sendUnaryData<xdsProto.IstioCertificateResponse>) => {
          const md = call.metadata;
          this.caCalls.push({
            authorization: md.get('authorization')[0]?.toString(),
            clusterId: md.get('clusterid')[0]?.toString(),
            csrPem: call.request.csr,
            validitySeconds: Number(call.request.validityDuration),
          });
          if (!this.#authorized(md)) return done({ code: grpc.status.UNAUTHENTICATED, details: 'authentication failure' });
          if (this.#caFailures.count > 0) {
            this.#caFailures.count -= 1;
            return done({ code: this.#caFailures.code, details: 'fake istiod CA failure' });
          }
          const ttl = Math.min(Number(call.request.validityDuration) || 86_400, this.#opts.maxTtlSeconds ?? Infinity);
          this.pki.sign(call.request.csr, ttl, this.issueAs).then(
            (certChain) => done(null, create(xdsProto.IstioCertificateResponseSchema, { certChain })),
            (err: Error) => done({ code: grpc.status.INVALID_ARGUMENT, details: err.message }),
          );
        },
        DeltaAggregatedResources: (call: grpc.ServerDuplexStream<Request, Response>) => this.#stream(call),
      },
    );
    const creds = grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(this.pki.servingKeyPem), cert_chain: Buffer.from(this.pki.servingCertPem) }], false);
    this.#port = await new Promise<number>((resolve, reject) => server.bindAsync(`${this.#opts.host}:${port}`, creds, (err, p) => (err ? reject(err) : resolve(p))));
    this.#server = server;
  }

  #stream(call: grpc.ServerDuplexStream<Request, Response>): void {
    const s = new AdsStream(call);
    this.streams.push(s);
    call.on('error', () => (s.ended = true));
    call.on('cancelled', () => (s.ended = true));
    call.on('end', () => {
      s.ended = true;
      call.end();
    });
    if (!this.#authorized(call.metadata)) {
      s.ended = true;
      call.emit('error', { code: grpc.status.UNAUTHENTICATED, details: 'authentication failure' });
      return;
    }
    call.on('data', (req: Request) => {
      s.requests.push(req);
      if (s.requests.length !== 1 || s.ended) return;
      // The first request: everything the client does not hold at this version, and what it holds that is gone.
      const held = req.initialResourceVersions;
      const resources = [...this.resources.values()].filter((r) => held[r.name] !== r.version);
      const removedResources = Object.keys(held).filter((name) => !this.resources.has(name));
      call.write(create(xdsProto.DeltaDiscoveryResponseSchema, { typeUrl: wdsProto.ADDRESS_TYPE_URL, nonce: `n${++this.#nonce}`, resources, removedResources }));
    });
  }
}
