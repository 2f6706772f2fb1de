/**
 * Opt-in (BENCH_GC=1): force a full GC in the waypoint process through its inspector port and read
 * `process.memoryUsage()` there, so idle-tunnel memory can be split into JS heap and the rest
 * without garbage blurring the figure. The waypoint is then started with `--inspect=<ip>:9229`.
 */

export interface RemoteMemory {
  readonly rssKiB: number;
  readonly heapUsedKiB: number;
  readonly heapTotalKiB: number;
  readonly externalKiB: number;
  readonly arrayBuffersKiB: number;
}

/** Collect garbage in the process behind `inspect` (`host:port`) and return its memory usage. */
export async function gcAndMeasure(inspect: string): Promise<RemoteMemory> {
  const res = await fetch(`http://${inspect}/json/list`, { signal: AbortSignal.timeout(3_000) });
  const targets = (await res.json()) as { webSocketDebuggerUrl?: string }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target at ${inspect}`);
  const ws = new WebSocket(url);
  try {
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve(), { once: true });
      ws.addEventListener('error', () => reject(new Error(`inspector websocket ${url} failed`)), { once: true });
    });
    let nextId = 1;
    const call = (method: string, params?: unknown) =>
      new Promise<unknown>((resolve, reject) => {
        const id = nextId++;
        const timer = setTimeout(() => reject(new Error(`inspector ${method} timed out`)), 10_000);
        const onMessage = (ev: MessageEvent) => {
          const m = JSON.parse(String(ev.data)) as { id?: number; result?: unknown; error?: { message: string } };
          if (m.id !== id) return;
          clearTimeout(timer);
          ws.removeEventListener('message', onMessage);
          if (m.error) reject(new Error(`inspector ${method}: ${m.error.message}`));
          else resolve(m.result);
        };
        ws.addEventListener('message', onMessage);
        ws.send(JSON.stringify({ id, method, params }));
      });
    await call('HeapProfiler.collectGarbage');
    await call('HeapProfiler.collectGarbage');
    const r = (await call('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true })) as { result: { value: string } };
    const m = JSON.parse(r.result.value) as { rss: number; heapUsed: number; heapTotal: number; external: number; arrayBuffers: number };
    const k = (v: number) => Math.round(v / 1024);
    return { rssKiB: k(m.rss), heapUsedKiB: k(m.heapUsed), heapTotalKiB: k(m.heapTotal), externalKiB: k(m.external), arrayBuffersKiB: k(m.arrayBuffers) };
  } finally {
    ws.close();
  }
}
