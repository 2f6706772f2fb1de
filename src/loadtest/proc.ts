/**
 * CPU and memory of a process on this machine, from Linux /proc: utime+stime of
 * /proc/<pid>/stat (every thread, in clock ticks; proc(5)) and VmRSS of /proc/<pid>/status.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

let clkTck: number | undefined;

/** Clock ticks per second (`getconf CLK_TCK`, almost always 100). */
export function clockTicks(): number {
  if (clkTck === undefined) {
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clkTck = 100;
    }
  }
  return clkTck;
}

/** CPU seconds (user + system, every thread) the process has used so far. @throws when it does not exist */
export function cpuSeconds(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Field 2 (comm) may contain spaces and parentheses: split after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
  return (Number(rest[14 - 3]) + Number(rest[15 - 3])) / clockTicks();
}

/** Resident set size in KiB (NaN when /proc does not say). @throws when the process does not exist */
export function rssKiB(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  return m ? Number(m[1]) : NaN;
}

/** `pid` and its descendants (children of children...), `pid` first, the others by pid. */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return [pid];
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue;
    }
    // Field 4 (ppid), after the parenthesised comm.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = children.get(ppid) ?? [];
    list.push(Number(e));
    children.set(ppid, list);
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of (children.get(p) ?? []).sort((a, b) => a - b)) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return [pid, ...out.sort((a, b) => a - b)];
}

/**
 * CPU seconds and RSS (KiB) of `pid` with its descendants: a waypoint run with `--concurrency N`
 * is a primary and N worker processes, and `--pid` names the primary. A descendant that exits
 * between the listing and the read is skipped. @throws when `pid` itself does not exist.
 */
export function treeUsage(pid: number): { cpuS: number; rssKiB: number } {
  return { cpuS: sumOverTree(pid, cpuSeconds), rssKiB: sumOverTree(pid, rssKiB) };
}

/**
 * `read` summed over `pid` and its descendants; a descendant that exits between the listing and
 * the read is skipped. @throws what `read` throws for `pid` itself.
 */
export function sumOverTree(pid: number, read: (pid: number) => number): number {
  let sum = 0;
  for (const p of processTree(pid)) {
    try {
      sum += read(p);
    } catch (err) {
      if (p === pid) throw err;
    }
  }
  return sum;
}
