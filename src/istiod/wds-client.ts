/**
 * The delta ADS client for workload discovery: one `DeltaAggregatedResources` stream to istiod
 * subscribed (wildcard) to `type.googleapis.com/istio.workload.Address`, kept open for the life of
 * the proxy, as ztunnel's (istio/ztunnel src/xds/client.rs):
 * - the first request carries the node and, after a reconnect, `initial_resource_versions` (the
 *   name and version of every resource held), so istiod sends only what changed;
 * - every response is answered with its nonce: an ACK, or a NACK (`error_detail`) naming the
 *   resources that did not decode or validate — those keep their previous state (and version, so
 *   istiod sends them again after a reconnect) while the valid ones of the same response apply;
 * - `removed_resources` drops resources;
 * - a stream that ends is reopened after a jittered backoff (short after a healthy stream, as
 *   istiod closes streams on purpose, growing while istiod cannot be reached); the last state is
 *   kept meanwhile.
 * Each change publishes a new immutable {@link WdsState} (`update`); `synced` fires once, after the
 * first response (istiod's first answer to a wildcard subscription is the whole state).
 */
import { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import type { ClientDuplexStream, StatusObject } from '@grpc/grpc-js';
import { Backoff, log, type BackoffSettings } from '../util/index.ts';
import { describeCallError, describeIstiodFailure } from './ca-client.ts';
import type { IstiodChannel } from './channel.ts';
import type { XdsNode } from './node.ts';
import { ADDRESS_TYPE_URL, type WdsService, type WdsWorkload } from './proto-workload.ts';
import { DELTA_ADS_METHOD, DeltaDiscoveryRequestSchema, DeltaDiscoveryResponseSchema, type DeltaDiscoveryRequest, type DeltaDiscoveryResponse } from './proto-xds.ts';
import { decodeAddressResource, type WdsEntry } from './wds-resource.ts';

/** google.rpc.Code INTERNAL, what Envoy puts in a NACK's `error_detail.code`. */
const NACK_CODE = 13;

/** One immutable view of what istiod sent. */
export interface WdsState {
  /** 0 before anything was received; +1 for every change. */
  readonly version: number;
  /** Workloads by resource name (their uid). */
  readonly workloads: ReadonlyMap<string, WdsWorkload>;
  /** Services by resource name (`namespace/hostname`). */
  readonly services: ReadonlyMap<string, WdsService>;
}

export type WdsClientEvents = {
  synced: [WdsState];
  update: [WdsState];
  /** A response was NACKed: the resources refused and why. */
  rejected: [string];
  /** The stream is open (`true`) or closed (`false`). */
  connection: [boolean];
};

export interface WdsClientOptions {
  readonly channel: IstiodChannel;
  readonly node: XdsNode;
  /** Reconnect delays (default 500 ms doubling to 15 s, jittered; ztunnel caps at 15 s). */
  readonly backoff?: BackoffSettings;
}

const EMPTY: WdsState = Object.freeze({ version: 0, workloads: new Map(), services: new Map() });

export class WdsClient extends EventEmitter<WdsClientEvents> {
  readonly #opts: WdsClientOptions;
  readonly #backoff: Backoff;
  #state: WdsState = EMPTY;
  /** Resource name → version held (only resources applied). */
  readonly #versions = new Map<string, string>();
  readonly #entries = new Map<string, WdsEntry>();
  #call: ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #synced = false;
  #connected = false;
  #started = false;
  #closed = false;
  #acks = 0;
  #nacks = 0;
  #connects = 0;
  #lastError: string | undefined;
  #syncedWaiters: { resolve: (s: WdsState) => void; reject: (e: Error) => void }[] = [];

  constructor(opts: WdsClientOptions) {
    super();
    this.#opts = opts;
    this.#backoff = new Backoff({ initialMs: opts.backoff?.initialMs ?? 500, maxMs: opts.backoff?.maxMs ?? 15_000 });
  }

  /** Open the stream (and keep reopening it until {@link close}). Idempotent. */
  start(): this {
    if (!this.#started && !this.#closed) {
      this.#started = true;
      this.#connect();
    }
    return this;
  }

  /** The current state (kept while disconnected). */
  get state(): WdsState {
    return this.#state;
  }

  /** True once the first response was handled; stays true when istiod goes away. */
  get synced(): boolean {
    return this.#synced;
  }

  get connected(): boolean {
    return this.#connected;
  }

  /** Why the last stream failed (worded by describeIstiodFailure), until a stream answers again. */
  get lastError(): string | undefined {
    return this.#lastError;
  }

  /** Responses ACKed, NACKed, and streams opened so far. */
  get stats(): { readonly acks: number; readonly nacks: number; readonly connects: number } {
    return { acks: this.#acks, nacks: this.#nacks, connects: this.#connects };
  }

  /** Resolves with the state of the first full sync; rejects if closed before. */
  whenSynced(): Promise<WdsState> {
    if (this.#synced) return Promise.resolve(this.#state);
    if (this.#closed) return Promise.reject(new Error('WDS client closed before the first sync'));
    return new Promise((resolve, reject) => this.#syncedWaiters.push({ resolve, reject }));
  }

  /** Stop: cancel the stream and any reconnect. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#call?.cancel();
    this.#call = undefined;
    for (const w of this.#syncedWaiters.splice(0)) w.reject(new Error('WDS client closed before the first sync'));
  }

  #connect(): void {
    if (this.#closed) return;
    let call: ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>;
    try {
      call = this.#opts.channel.stream(DELTA_ADS_METHOD, DeltaDiscoveryRequestSchema, DeltaDiscoveryResponseSchema);
    } catch (err) {
      return this.#retry(`cannot open the stream to istiod: ${(err as Error).message}`, false);
    }
    this.#call = call;
    this.#connects += 1;
    let healthy = false;
    call.on('data', (response: DeltaDiscoveryResponse) => {
      if (this.#call !== call) return;
      if (!healthy) {
        healthy = true;
        this.#lastError = undefined;
        this.#setConnected(true);
      }
      this.#handle(call, response);
    });
    call.on('error', () => {}); // the same ending arrives as 'status'
    call.on('status', (status: StatusObject) => {
      if (this.#call !== call) return;
      this.#call = undefined;
      this.#setConnected(false);
      const why = healthy ? `stream ended: ${describeCallError(status)}` : describeIstiodFailure(status);
      this.#retry(why, healthy);
    });
    const initial = create(DeltaDiscoveryRequestSchema, {
      node: { id: this.#opts.node.id, metadata: this.#opts.node.metadata },
      typeUrl: ADDRESS_TYPE_URL,
      initialResourceVersions: Object.fromEntries(this.#versions),
    });
    log.debug({ target: this.#opts.channel.target, resources: this.#versions.size }, 'WDS: stream opened; sending the initial request');
    call.write(initial);
  }

  /** Reopen after a backoff: a short one after a stream that worked (istiod closes streams on purpose). */
  #retry(why: string, wasHealthy: boolean): void {
    if (this.#closed) return;
    if (wasHealthy) this.#backoff.reset();
    const delayMs = this.#backoff.next();
    const fields = { target: this.#opts.channel.target, retryMs: delayMs, failures: this.#backoff.attempts, synced: this.#synced };
    if (wasHealthy) log.info(fields, `WDS: ${why}; reconnecting (keeping the last state)`);
    else {
      this.#lastError = why;
      log.warn(fields, `WDS: ${why}; retrying (keeping the last state)`);
    }
    this.#timer = setTimeout(() => this.#connect(), delayMs);
    this.#timer.unref();
  }

  #setConnected(up: boolean): void {
    if (this.#connected === up) return;
    this.#connected = up;
    this.emit('connection', up);
  }

  /** Apply one response, then ACK or NACK it. */
  #handle(call: ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>, response: DeltaDiscoveryResponse): void {
    const rejects: string[] = [];
    let changed = false;
    if (response.typeUrl !== ADDRESS_TYPE_URL) {
      rejects.push(`unexpected type ${JSON.stringify(response.typeUrl)} (subscribed to ${ADDRESS_TYPE_URL} only)`);
    } else {
      for (const name of response.removedResources) {
        this.#versions.delete(name);
        changed = this.#entries.delete(name) || changed;
      }
      for (const r of response.resources) {
        if (!r.name) {
          rejects.push('(unnamed): resource without a name');
          continue;
        }
        try {
          this.#entries.set(r.name, decodeAddressResource(r));
          this.#versions.set(r.name, r.version);
          changed = true;
        } catch (err) {
          rejects.push(`${r.name}: ${(err as Error).message}`);
        }
      }
    }
    if (changed) this.#publish();
    const nack = rejects.length > 0;
    if (nack) {
      this.#nacks += 1;
      const detail = rejects.join('; ');
      log.error({ nonce: response.nonce, rejected: rejects.length, applied: response.resources.length - rejects.length }, `WDS: NACK: ${detail}`);
      this.emit('rejected', detail);
    } else {
      this.#acks += 1;
    }
    call.write(
      create(DeltaDiscoveryRequestSchema, {
        typeUrl: response.typeUrl,
        responseNonce: response.nonce,
        ...(nack ? { errorDetail: { code: NACK_CODE, message: rejects.join('; ') } } : {}),
      }),
    );
    if (!this.#synced) {
      this.#synced = true;
      log.info({ workloads: this.#state.workloads.size, services: this.#state.services.size }, 'WDS: first sync from istiod');
      this.emit('synced', this.#state);
      for (const w of this.#syncedWaiters.splice(0)) w.resolve(this.#state);
    }
  }

  #publish(): void {
    const workloads = new Map<string, WdsWorkload>();
    const services = new Map<string, WdsService>();
    for (const [name, e] of this.#entries) {
      if (e.kind === 'workload') workloads.set(name, e.value);
      else services.set(name, e.value);
    }
    this.#state = Object.freeze({ version: this.#state.version + 1, workloads, services });
    this.emit('update', this.#state);
  }
}
