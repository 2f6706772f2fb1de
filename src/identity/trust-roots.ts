/**
 * Trust roots read from files that change while the proxy runs: istiod's root certificate
 * (`/var/run/secrets/istio/root-cert.pem`, the `istio-ca-root-cert` ConfigMap, which kubelet
 * replaces by swapping a symlink when istiod's root rotates). The files are polled by path (a
 * `stat` that follows the symlink, so a swap is seen), re-read when they change, and every
 * consumer hears of new roots: the TLS channel to istiod and the workload certificate's material.
 * ztunnel does the same (istio/ztunnel src/tls/root_cert_manager.rs, rebuilding its channel).
 */
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import { log } from '../util/index.ts';
import { readTrustRoot } from './ca.ts';

/** `changed` carries the new PEM (every file's certificates, in file order). */
export type TrustRootEvents = { changed: [string] };

/** What to give instead of a wrong istiod root file (readTrustRoot's hint). */
export const ISTIO_ROOT_HINT = "give istiod's root certificate (root-cert.pem of the istio-ca-root-cert ConfigMap)";

/** Poll interval by default: kubelet refreshes projected ConfigMaps about once a minute. */
const DEFAULT_POLL_MS = 5_000;

export class TrustRootFiles extends EventEmitter<TrustRootEvents> {
  readonly files: readonly string[];
  #pem: string | undefined;
  #problem: string | undefined;
  #reading: Promise<boolean> = Promise.resolve(false);
  #closed = false;
  #settle: NodeJS.Timeout | undefined;
  readonly #onStat = () => void this.refresh();
  readonly #pollMs: number;

  private constructor(files: readonly string[], pollMs: number) {
    super();
    this.files = files;
    this.#pollMs = pollMs;
  }

  /**
   * Read `files` (one or more PEM files of CA certificates; several roots allowed) and watch them.
   * Never throws for a missing or invalid file: {@link pem} stays undefined and {@link problem}
   * says why, until a later poll reads them (a pod may start before its ConfigMap is mounted).
   */
  static async open(files: readonly string[], opts: { pollMs?: number } = {}): Promise<TrustRootFiles> {
    if (files.length === 0) throw new Error('no trust root file given');
    const roots = new TrustRootFiles([...files], opts.pollMs ?? DEFAULT_POLL_MS);
    await roots.refresh();
    for (const f of roots.files) fs.watchFile(f, { interval: roots.#pollMs, persistent: false }, roots.#onStat);
    // The watcher compares against its own first stat, taken asynchronously after the read above:
    // a change landing between the two would never be reported. Read once more after that stat.
    roots.#settle = setTimeout(() => void roots.refresh(), Math.max(2 * roots.#pollMs, 1000));
    roots.#settle.unref();
    return roots;
  }

  /** The roots (PEM), or undefined while no complete, valid set has been read. */
  get pem(): string | undefined {
    return this.#pem;
  }

  /** Why the files could not be read last time (undefined when the last read succeeded). */
  get problem(): string | undefined {
    return this.#problem;
  }

  /**
   * The roots, or an Error naming the file and what is wrong with it when none were ever read.
   */
  require(): string {
    if (this.#pem !== undefined) return this.#pem;
    throw new Error(this.#problem ?? 'trust roots not read yet');
  }

  /**
   * Re-read the files now. A file that cannot be read or is not CA certificates keeps the roots
   * read before (logged). Resolves true when the roots changed (`changed` was emitted).
   */
  refresh(): Promise<boolean> {
    // Reads in turn (a poll during a read would report the same change twice), each one after
    // the call: a caller that just changed the file gets a read of its change.
    const next = () => this.#read();
    const read = this.#reading.then(next, next);
    this.#reading = read;
    return read;
  }

  async #read(): Promise<boolean> {
    let text = '';
    for (const f of this.files) {
      try {
        text += await readTrustRoot(f, ISTIO_ROOT_HINT);
        if (!text.endsWith('\n')) text += '\n';
      } catch (err) {
        const problem = `trust root file ${f}: ${(err as Error).message}`;
        if (problem !== this.#problem) {
          log.error({ file: f, keeping: this.#pem !== undefined }, `${problem}${this.#pem !== undefined ? '; keeping the roots read before' : ''}`);
        }
        this.#problem = problem;
        return false;
      }
    }
    this.#problem = undefined;
    if (text === this.#pem || this.#closed) return false;
    const first = this.#pem === undefined;
    this.#pem = text;
    if (!first) log.info({ files: this.files }, 'trust roots changed; using the new roots');
    this.emit('changed', text);
    return true;
  }

  /** Stop watching. Idempotent. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#settle);
    for (const f of this.files) fs.unwatchFile(f, this.#onStat);
  }
}
