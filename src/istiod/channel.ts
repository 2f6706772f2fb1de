/**
 * The gRPC channel to istiod (CA and xDS share it, as ztunnel's do: istio/ztunnel src/tls/control.rs,
 * src/identity/auth.rs): @grpc/grpc-js over TLS, istiod's serving certificate verified against the
 * trust-root file(s) for the name `istiod.istio-system.svc` (the SAN istiod's certificate carries),
 * and on every call the metadata `authorization: Bearer <token>` — the projected service-account
 * token, read from its file at each call because kubelet rotates it — and `ClusterID`
 * (istio/istio security/pkg/nodeagent/caclient/providers/citadel/client.go). When the trust roots
 * change the channel is rebuilt for the next calls; calls under way finish on the old one.
 */
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { fromBinary, toBinary, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import type { TrustRootFiles } from '../identity/index.ts';

/** The name istiod's serving certificate is issued for (istio/istio pilot/pkg/bootstrap/istio_ca.go). */
export const ISTIOD_SERVER_NAME = 'istiod.istio-system.svc';
/** Istio's default discovery and CA address. */
export const DEFAULT_ISTIOD_ADDRESS = 'istiod.istio-system.svc:15012';

/** A parsed `host:port` (`[v6]:port` for IPv6). */
export interface IstiodAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * Parse istiod's address (`CA_ADDR`, ProxyConfig `discoveryAddress`): `host:port`, `ip:port` or
 * `[ipv6]:port`, port 1–65535. @throws Error saying what was expected.
 */
export function parseIstiodAddress(text: string): IstiodAddress {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(text.trim());
  const port = m ? Number(m[3]) : NaN;
  const host = m ? (m[1] ?? m[2]) : '';
  if (!m || port < 1 || port > 65535 || (m[1] !== undefined && isIP(host) !== 6)) {
    throw new Error(`invalid istiod address ${JSON.stringify(text)}: expected host:port (e.g. ${DEFAULT_ISTIOD_ADDRESS}), ip:port or [ipv6]:port`);
  }
  return { host, port };
}

export interface IstiodChannelOptions {
  /** istiod's `host:port` ({@link parseIstiodAddress}). */
  readonly address: string;
  /** Roots istiod's serving certificate must chain to (the `istio-ca-root-cert` file(s)). */
  readonly roots: TrustRootFiles;
  /** The projected service-account token (audience `istio-ca`), read on every call. */
  readonly tokenFile: string;
  /** Sent as `ClusterID` (Istio's `ISTIO_META_CLUSTER_ID`, default `Kubernetes`). */
  readonly clusterId: string;
  /** Name verified in istiod's certificate (and sent as SNI): default the address's host when it is a DNS name, else {@link ISTIOD_SERVER_NAME}. */
  readonly serverName?: string;
  /** More metadata on every call (ztunnel's `CA_HEADER_*` / `XDS_HEADER_*`). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Largest message accepted (default 200 MiB, ztunnel's: a WDS push of a big mesh is large). */
  readonly maxReceiveBytes?: number;
}

/** One grpc-js client and the calls still using it (closed once retired and idle). */
interface ClientRef {
  readonly client: grpc.Client;
  calls: number;
  retired: boolean;
}

export class IstiodChannel {
  readonly address: IstiodAddress;
  readonly serverName: string;
  readonly #opts: IstiodChannelOptions;
  #current: ClientRef | undefined;
  readonly #onRoots = () => this.#retire();
  #closed = false;

  /** @throws Error for an invalid address. */
  constructor(opts: IstiodChannelOptions) {
    this.address = parseIstiodAddress(opts.address);
    this.serverName = opts.serverName ?? (isIP(this.address.host) ? ISTIOD_SERVER_NAME : this.address.host);
    this.#opts = opts;
    opts.roots.on('changed', this.#onRoots);
  }

  /** `host:port` as grpc-js dials it. */
  get target(): string {
    return isIP(this.address.host) === 6 ? `[${this.address.host}]:${this.address.port}` : `${this.address.host}:${this.address.port}`;
  }

  /**
   * One unary call. Rejects with the gRPC error (its `code`, `details`), with a token-file error
   * (UNAVAILABLE, "Getting metadata from plugin failed"), or when the roots were never read.
   */
  unary<I extends DescMessage, O extends DescMessage>(method: string, input: I, output: O, request: MessageShape<I>, opts: { deadlineMs?: number } = {}): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      let ref: ClientRef;
      try {
        ref = this.#acquire();
      } catch (err) {
        return reject(err);
      }
      const deadline = Date.now() + (opts.deadlineMs ?? 30_000);
      ref.client.makeUnaryRequest(
        method,
        (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
        (b: Buffer) => fromBinary(output, b),
        request,
        new grpc.Metadata(),
        { deadline },
        (err, value) => {
          this.#release(ref);
          if (err) reject(err);
          else resolve(value!);
        },
      );
    });
  }

  /**
   * Open a bidirectional stream. Its `status` event (or `error`) ends it; the client behind it
   * stays open until then. @throws when the roots were never read or the channel is closed.
   */
  stream<I extends DescMessage, O extends DescMessage>(method: string, input: I, output: O): grpc.ClientDuplexStream<MessageShape<I>, MessageShape<O>> {
    const ref = this.#acquire();
    const call = ref.client.makeBidiStreamRequest(
      method,
      (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
      (b: Buffer) => fromBinary(output, b),
      new grpc.Metadata(),
    );
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.#release(ref);
    };
    call.once('status', release);
    call.once('error', release);
    call.once('close', release);
    return call;
  }

  /** Close the channel: calls under way end with CANCELLED/UNAVAILABLE. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#opts.roots.off('changed', this.#onRoots);
    if (this.#current) this.#current.client.close();
    this.#current = undefined;
  }

  #acquire(): ClientRef {
    if (this.#closed) throw new Error('the istiod channel is closed');
    this.#current ??= { client: this.#build(), calls: 0, retired: false };
    this.#current.calls += 1;
    return this.#current;
  }

  #release(ref: ClientRef): void {
    ref.calls -= 1;
    if (ref.retired && ref.calls === 0) ref.client.close();
  }

  /** New roots: the next call builds a new client; this one closes when its calls end. */
  #retire(): void {
    const old = this.#current;
    if (!old) return;
    this.#current = undefined;
    old.retired = true;
    if (old.calls === 0) old.client.close();
  }

  #build(): grpc.Client {
    const opts = this.#opts;
    const roots = opts.roots.require();
    const callCreds = grpc.credentials.createFromMetadataGenerator((_params, callback) => {
      readFile(opts.tokenFile, 'utf8').then(
        (token) => {
          const md = new grpc.Metadata();
          for (const [k, v] of Object.entries(opts.headers ?? {})) md.set(k, v);
          md.set('authorization', `Bearer ${token.trim()}`);
          md.set('ClusterID', opts.clusterId);
          callback(null, md);
        },
        (err: NodeJS.ErrnoException) =>
          callback(new Error(err.code === 'ENOENT' ? `the token file ${opts.tokenFile} does not exist (a projected service-account token with audience istio-ca)` : `cannot read the token file ${opts.tokenFile}: ${err.message}`)),
      );
    });
    const creds = grpc.credentials.combineChannelCredentials(grpc.credentials.createSsl(Buffer.from(roots)), callCreds);
    return new grpc.Client(this.target, creds, {
      'grpc.ssl_target_name_override': this.serverName,
      'grpc.default_authority': this.serverName,
      'grpc.max_receive_message_length': opts.maxReceiveBytes ?? 200 * 1024 * 1024,
    });
  }
}
