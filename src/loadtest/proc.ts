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
