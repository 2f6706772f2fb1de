/**
 * Exponential backoff with jitter for retrying a remote (istiod's CA, its xDS stream): each delay
 * doubles up to a cap and is drawn at random from its upper half, so that many proxies that lost
 * the same control plane at once do not come back at the same instant (the "equal jitter" of
 * AWS's "Exponential Backoff and Jitter"; gRPC's connection-backoff.md jitters by ±20%).
 */

/** Delays of {@link Backoff}, in ms. */
export interface BackoffSettings {
  /** The first delay's upper bound (default 1000). */
  readonly initialMs?: number;
  /** Largest upper bound (default 30 000). */
  readonly maxMs?: number;
}

export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  #attempt = 0;

  constructor(settings: BackoffSettings = {}) {
    this.#initialMs = settings.initialMs ?? 1000;
    this.#maxMs = Math.max(settings.maxMs ?? 30_000, this.#initialMs);
    if (!(this.#initialMs > 0)) throw new Error(`backoff initialMs must be positive, got ${this.#initialMs}`);
  }

  /** Failures in a row so far (since the last {@link reset}). */
  get attempts(): number {
    return this.#attempt;
  }

  /** The delay before the next try: in [cap/2, cap), cap = min(initial × 2^failures, max). */
  next(): number {
    const cap = Math.min(this.#initialMs * 2 ** Math.min(this.#attempt, 30), this.#maxMs);
    this.#attempt += 1;
    return Math.round(cap / 2 + Math.random() * (cap / 2));
  }

  /** After a success: the next failure starts from the initial delay again. */
  reset(): void {
    this.#attempt = 0;
  }
}
