/**
 * Per-process CPU and memory from Linux /proc (utime+stime of /proc/<pid>/stat, VmRSS of
 * /proc/<pid>/status), open descriptors, whole-machine busy time, and snapshots of several
 * processes at once around a measured window. A process is measured with its descendants (a
 * waypoint run with `--concurrency N` is a primary and N workers), and a snapshot also keeps each
 * process of such a tree on its own (see {@link snapshot}).
 */
import fs from 'node:fs';
import { clockTicks, cpuSeconds, processTree, rssKiB as processRssKiB, sumOverTree } from '../../src/loadtest/index.ts';

// The per-process readings are the load tester's own (src/loadtest/proc.ts); RSS and descriptors
// here are summed over a process and its descendants.
export { clockTicks, cpuSeconds, processTree };

/** Resident set size in KiB of the process and its descendants (pages they share are counted in each); NaN when it is gone. */
export function rssKiB(pid: number): number {
  return orNaN(() => sumOverTree(pid, processRssKiB));
}

/** Open file descriptors of the process and its descendants; NaN when it is gone. */
export function fdCount(pid: number): number {
  return orNaN(() => sumOverTree(pid, (p) => fs.readdirSync(`/proc/${p}/fd`).length));
}

function orNaN(read: () => number): number {
  try {
    return read();
  } catch {
    return NaN;
  }
}

/** Busy CPU seconds of the whole machine (every state of /proc/stat's `cpu` line but idle and iowait). */
export function machineBusySeconds(): number {
  const line = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0];
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal guest guest_nice (guest time is already in user).
  const busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] ?? 0);
  return busy / clockTicks();
}

/** Key of the whole-machine entry in a {@link CpuSnapshot}. */
export const MACHINE = 'machine';

/**
 * Separator of the per-process entries of a tree in a {@link CpuSnapshot}: `waypoint/primary`,
 * `waypoint/worker1`, ... beside `waypoint` (their sum). They are not added to "ours" twice.
 */
export const PART = '/';

/** A CPU snapshot of several processes (and the whole machine, as {@link MACHINE}) at one instant. */
export interface CpuSnapshot {
  readonly at: number;
  readonly cpu: Record<string, number>;
}

export function snapshot(pids: Record<string, number>): CpuSnapshot {
  const cpu: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) {
    const tree = processTree(pid);
    let sum = 0;
    for (const [i, p] of tree.entries()) {
      let v: number;
      try {
        v = cpuSeconds(p);
      } catch {
        v = NaN;
      }
      // A child that exited between the listing and the read used nothing we can still count.
      sum += Number.isNaN(v) && i > 0 ? 0 : v;
      if (tree.length > 1) cpu[`${name}${PART}${i === 0 ? 'primary' : `worker${i}`}`] = v;
    }
    cpu[name] = sum;
  }
  try {
    cpu[MACHINE] = machineBusySeconds();
  } catch {
    cpu[MACHINE] = NaN;
  }
  return { at: performance.now(), cpu };
}

/** Per process: cores used between two snapshots, and µs of CPU per request when `requests` > 0. */
export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot, requests: number): Record<string, { cpuS: number; cores: number; usPerReq: number | null }> {
  const wallS = (b.at - a.at) / 1000;
  const out: Record<string, { cpuS: number; cores: number; usPerReq: number | null }> = {};
  let ours = 0;
  for (const name of Object.keys(a.cpu)) {
    const cpuS = b.cpu[name] - a.cpu[name];
    if (name !== MACHINE && !name.includes(PART) && Number.isFinite(cpuS)) ours += cpuS;
    out[name] = { cpuS: round(cpuS, 3), cores: round(cpuS / wallS, 4), usPerReq: requests > 0 ? round((cpuS * 1e6) / requests, 1) : null };
  }
  // What the rest of the machine did meanwhile (other sessions, the kernel's softirq time...).
  if (MACHINE in out) {
    const other = out[MACHINE].cpuS - ours;
    out.other = { cpuS: round(other, 3), cores: round(other / wallS, 4), usPerReq: null };
  }
  return out;
}

export function round(v: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}
