/**
 * Gateway API `Duration` strings (GEP-2257, used by HTTPRoute `timeouts` and `retry.backoff`):
 * one to four `<1-5 digits><unit>` parts with units `h`, `m`, `s`, `ms`, e.g. `10s`, `1m30s`,
 * `500ms`. The CRD's pattern is `^([0-9]{1,5}(h|m|s|ms)){1,4}$`; Go's duration syntax beyond it
 * (`1.5s`, `us`) is refused, as the API server would refuse it.
 */

const DURATION = /^([0-9]{1,5}(h|ms|m|s)){1,4}$/;
const PART = /([0-9]{1,5})(h|ms|m|s)/g;
const UNIT_MS: Readonly<Record<string, number>> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 };

/** Node timers accept at most 2^31-1 ms (about 24.8 days); longer durations are capped there. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Milliseconds of a Gateway API Duration (`0s` = 0), capped at {@link MAX_TIMER_MS}.
 * @throws Error naming the expected form when `text` is not a Gateway API Duration.
 */
export function parseDuration(text: string): number {
  if (!DURATION.test(text)) {
    throw new Error(`must be a Gateway API duration such as "10s", "500ms" or "1m30s" (1-4 parts of up to 5 digits with unit h, m, s or ms), got ${JSON.stringify(text)}`);
  }
  let ms = 0;
  for (const [, digits, unit] of text.matchAll(PART)) ms += Number(digits) * UNIT_MS[unit];
  return Math.min(ms, MAX_TIMER_MS);
}
