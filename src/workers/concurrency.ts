/**
 * How many worker processes `waypoint run` starts by default: the CPU quota of its cgroup (v2
 * `cpu.max`, the smallest along the path to the root, rounded up), else the cores it may run on.
 * As Envoy's `--concurrency` defaults to the hardware threads and Istio sizes a waypoint's workers to
 * its CPU limit, a container limited to 2 CPUs gets 2 workers on a 64-core node.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** Where cgroup v2 is mounted. */
const CGROUP_ROOT = '/sys/fs/cgroup';

/** The default `--concurrency`: see the module comment. Never less than 1. */
export function defaultConcurrency(): number {
  const cores = os.availableParallelism();
  const quota = cgroupCpuQuota();
  return Math.max(1, quota === undefined ? cores : Math.min(cores, Math.ceil(quota)));
}

/**
 * The CPUs this process's cgroup v2 may use (`quota / period` of `cpu.max`, the smallest of its
 * cgroup and their parents), or undefined when unlimited or not on cgroup v2.
 * `root` and `procCgroup` are for tests.
 */
export function cgroupCpuQuota(root = CGROUP_ROOT, procCgroup = '/proc/self/cgroup'): number | undefined {
  let rel: string | undefined;
  try {
    // cgroup v2 has one line, `0::/path`.
    rel = fs.readFileSync(procCgroup, 'utf8').split('\n').find((l) => l.startsWith('0::'))?.slice(3);
  } catch {
    return undefined;
  }
  if (rel === undefined) return undefined;
  let best: number | undefined;
  for (let dir = path.posix.join('/', rel); ; dir = path.posix.dirname(dir)) {
    const cpus = readCpuMax(path.join(root, dir, 'cpu.max'));
    if (cpus !== undefined && (best === undefined || cpus < best)) best = cpus;
    if (dir === '/') break;
  }
  return best;
}

/** `cpu.max` is `<quota|max> <period>`: quota / period, or undefined for `max` or no file. */
function readCpuMax(file: string): number | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
  const [quota, period] = text.split(/\s+/);
  if (quota === 'max') return undefined;
  const q = Number(quota);
  const p = Number(period ?? 100_000);
  return Number.isFinite(q) && q > 0 && Number.isFinite(p) && p > 0 ? q / p : undefined;
}

/** Parse `--concurrency N`: a whole number ≥ 1. @throws Error naming the flag. */
export function parseConcurrency(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1) throw new Error(`--concurrency ${JSON.stringify(value)}: expected a whole number of worker processes, at least 1 (1 runs the waypoint in this process)`);
  return n;
}
