/** Bounded waits for shutdown paths: give graceful closing a moment, never hang on it. */

/** Wait for `p` at most `ms` milliseconds; never rejects. */
export async function settleWithin(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p.catch(() => undefined), new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}
