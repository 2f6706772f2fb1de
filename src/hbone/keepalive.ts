/**
 * HTTP/2 PING keepalive for an HBONE session, as ztunnel and Istio's waypoint do (first PING after
 * `intervalMs`, then every `intervalMs`; no answer within `timeoutMs` ⇒ the session is destroyed,
 * so a dead peer never strands streams). Timers are unref'd: they never keep the process alive.
 */
import type { Http2Session } from 'node:http2';

/** Start keepalive on `session`; it stops by itself when the session closes. `intervalMs` 0 disables. */
export function startKeepalive(session: Http2Session, intervalMs: number, timeoutMs: number): void {
  if (intervalMs <= 0) return;
  let outstanding = false;
  let sentAt = 0;
  const timer = setInterval(() => {
    if (session.destroyed || session.closed) return clearInterval(timer);
    if (outstanding) {
      if (performance.now() - sentAt > timeoutMs) session.destroy(new Error('HTTP/2 keepalive timeout'));
      return;
    }
    outstanding = true;
    sentAt = performance.now();
    try {
      session.ping((err) => {
        if (!err) outstanding = false;
      });
    } catch {
      // The session is closing; the close handler below clears the timer.
    }
  }, Math.min(intervalMs, timeoutMs)).unref();
  session.once('close', () => clearInterval(timer));
}
