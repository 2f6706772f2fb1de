/**
 * Force a full GC in the waypoint processes through their inspector ports and read
 * `process.memoryUsage()` there, so idle-tunnel memory can be split into JS heap and the rest
 * without garbage blurring the figure. The waypoints start with `--inspect-port=<ip>:9229` (the
 * inspector is off; node:cluster gives each worker the next port on the same IP): the idle flow
 * opens the inspectors (SIGUSR1) and closes them again, so the CPU runs never have one. With
 * BENCH_GC=1 they start with `--inspect=<ip>:9229` instead and keep it (a GC at each path's end too).
 */
import fs from 'node:fs';
import { processTree } from './proc.ts';

export interface RemoteMemory {
  readonly rssKiB: number;
  readonly heapUsedKiB: number;
  readonly heapTotalKiB: number;
  readonly externalKiB: number;
  readonly arrayBuffersKiB: number;
  /** The same reading just before the forced GC, with V8's young generation (committed): what garbage held. */
  readonly beforeGc?: { readonly rssKiB: number; readonly heapUsedKiB: number; readonly heapTotalKiB: number; readonly newSpaceKiB: number };
}

/** `process.memoryUsage()` and the young generation's committed size, read inside the process. */
const MEMORY_EXPR = `JSON.stringify({ ...process.memoryUsage(), newSpace: process.getBuiltinModule('v8').getHeapSpaceStatistics().filter((s) => s.space_name === 'new_space').reduce((n, s) => n + s.physical_space_size, 0) })`;

/** One inspector session on the process behind `inspect` (`host:port`): `call` sends a command, `on` hears events. */
async function session<T>(inspect: string, use: (call: (method: string, params?: unknown) => Promise<unknown>, on: (method: string, fn: (params: unknown) => void) => void) => Promise<T>): Promise<T> {
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
    const on = (method: string, fn: (params: unknown) => void) =>
      ws.addEventListener('message', (ev: MessageEvent) => {
        const m = JSON.parse(String(ev.data)) as { method?: string; params?: unknown };
        if (m.method === method) fn(m.params);
      });
    const call = (method: string, params?: unknown) =>
      new Promise<unknown>((resolve, reject) => {
        const id = nextId++;
        const timer = setTimeout(() => reject(new Error(`inspector ${method} timed out`)), 60_000);
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
    return await use(call, on);
  } finally {
    ws.close();
  }
}

/** Collect garbage in the process behind `inspect` (`host:port`) and return its memory usage. */
export function gcAndMeasure(inspect: string): Promise<RemoteMemory> {
  return session(inspect, async (call) => {
    type Usage = { rss: number; heapUsed: number; heapTotal: number; external: number; arrayBuffers: number; newSpace: number };
    const read = async () => JSON.parse(((await call('Runtime.evaluate', { expression: MEMORY_EXPR, returnByValue: true })) as { result: { value: string } }).result.value) as Usage;
    const k = (v: number) => Math.round(v / 1024);
    const b = await read();
    await call('HeapProfiler.collectGarbage');
    await call('HeapProfiler.collectGarbage');
    const m = await read();
    return {
      rssKiB: k(m.rss),
      heapUsedKiB: k(m.heapUsed),
      heapTotalKiB: k(m.heapTotal),
      externalKiB: k(m.external),
      arrayBuffersKiB: k(m.arrayBuffers),
      beforeGc: { rssKiB: k(b.rss), heapUsedKiB: k(b.heapUsed), heapTotalKiB: k(b.heapTotal), newSpaceKiB: k(b.newSpace) },
    };
  });
}

/**
 * Write a heap snapshot of the process behind `inspect` to `file` (V8 collects garbage first), for
 * `node bench/heap-diff.ts before after`: what the live objects are, by constructor.
 */
export function heapSnapshot(inspect: string, file: string): Promise<void> {
  return session(inspect, async (call, on) => {
    const fd = fs.openSync(file, 'w');
    try {
      on('HeapProfiler.addHeapSnapshotChunk', (p) => fs.writeSync(fd, (p as { chunk: string }).chunk));
      await call('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    } finally {
      fs.closeSync(fd);
    }
  });
}

/**
 * The inspector address (`host:port`) of each process of the tree under `pid` that has one
 * configured, from its command line (`--inspect[-port]=[host:]port`, the last one wins, the host
 * carried over from an earlier one as Node does).
 */
export function inspectorAddresses(pid: number): string[] {
  const out: string[] = [];
  for (const p of processTree(pid)) {
    let args: string[];
    try {
      args = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    let host = '127.0.0.1';
    let port: string | undefined;
    for (const a of args) {
      const m = /^--inspect(?:-port)?=(?:(.+):)?(\d+)$/.exec(a);
      if (!m) continue;
      if (m[1]) host = m[1];
      port = m[2];
    }
    if (port) out.push(`${host}:${port}`);
  }
  return out;
}

/** Whether an inspector answers at `inspect`. */
async function listening(inspect: string): Promise<boolean> {
  try {
    await fetch(`http://${inspect}/json/list`, { signal: AbortSignal.timeout(1_000) });
    return true;
  } catch {
    return false;
  }
}

/**
 * Open the inspector of each process of the tree under `pid` (SIGUSR1 starts it on the process's
 * `--inspect-port`) and wait until they all answer. Returns their addresses, for {@link closeInspectors}.
 */
export async function openInspectors(pid: number): Promise<string[]> {
  const addresses = inspectorAddresses(pid);
  for (const p of processTree(pid)) process.kill(p, 'SIGUSR1');
  const deadline = Date.now() + 10_000;
  for (const a of addresses) {
    while (!(await listening(a))) {
      if (Date.now() > deadline) throw new Error(`the inspector at ${a} did not open within 10 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return addresses;
}

/** Close the inspectors {@link openInspectors} opened (`inspector.close()` in each, once this session is gone). */
export async function closeInspectors(addresses: readonly string[]): Promise<void> {
  for (const a of addresses) {
    await session(a, (call) => call('Runtime.evaluate', { expression: "void setTimeout(() => process.getBuiltinModule('inspector').close(), 100)" }));
  }
  const deadline = Date.now() + 5_000;
  for (const a of addresses) while ((await listening(a)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
}

/** {@link gcAndMeasure} over several processes (a waypoint primary and its workers): the sums. */
export async function gcAndMeasureAll(addresses: readonly string[]): Promise<RemoteMemory> {
  const all = await Promise.all(addresses.map((a) => gcAndMeasure(a)));
  const sum = (f: (m: RemoteMemory) => number) => all.reduce((n, m) => n + f(m), 0);
  return {
    rssKiB: sum((m) => m.rssKiB),
    heapUsedKiB: sum((m) => m.heapUsedKiB),
    heapTotalKiB: sum((m) => m.heapTotalKiB),
    externalKiB: sum((m) => m.externalKiB),
    arrayBuffersKiB: sum((m) => m.arrayBuffersKiB),
    beforeGc: {
      rssKiB: sum((m) => m.beforeGc?.rssKiB ?? 0),
      heapUsedKiB: sum((m) => m.beforeGc?.heapUsedKiB ?? 0),
      heapTotalKiB: sum((m) => m.beforeGc?.heapTotalKiB ?? 0),
      newSpaceKiB: sum((m) => m.beforeGc?.newSpaceKiB ?? 0),
    },
  };
}
