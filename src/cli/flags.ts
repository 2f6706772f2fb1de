/**
 * Flag handling shared by the commands: listen-address flags checked up front and named in bind
 * errors (`--hbone 10.1.2.3:15008: address not available`), `--ca` checked to be a CA
 * certificate, and `--pid-file`.
 */
import fs from 'node:fs';
import { InvalidArgumentError } from 'commander';
import ms from 'ms';
import { readTrustRoot } from '../identity/index.ts';
import { parseListenAddress } from '../util/index.ts';

/** Help text suffix of a mandatory option (commander's help does not mark them). */
export const REQUIRED = ' (required)';

/** A listen-address flag as given on the command line. */
export interface ListenFlag {
  readonly flag: string;
  readonly value: string;
}

/**
 * Check `value` of `flag` is `ADDR:PORT` or `[IPv6]:PORT` (`''` too when `allowEmpty`: "disabled").
 * @throws Error naming the flag and the value.
 */
export function checkListenFlag(flag: string, value: string, allowEmpty = false): void {
  if (allowEmpty && value === '') return;
  try {
    parseListenAddress(value);
  } catch {
    const shown = /^[^\s"]+$/.test(value) ? value : JSON.stringify(value);
    throw new Error(`${flag} ${shown}: expected IP:PORT or [IPv6]:PORT (e.g. 127.0.0.1:15008)`);
  }
}

/**
 * A commander parser of a duration flag (`5s`, `500ms`, `1m`; a bare number is milliseconds; `0`
 * allowed) into milliseconds, bounded as Node timers are. A bad value is a usage error.
 */
export function durationFlag(value: string): number {
  let n: number | undefined;
  try {
    n = /^\d+$/.test(value) ? Number(value) : (ms(value as ms.StringValue) as number | undefined);
  } catch {
    n = undefined;
  }
  if (n === undefined || !Number.isFinite(n) || n < 0 || n > 2_147_483_647) {
    throw new InvalidArgumentError('expected a duration such as 5s, 500ms or 1m (0 for none)');
  }
  return Math.round(n);
}

const BIND_ERRORS = new Set(['EADDRINUSE', 'EADDRNOTAVAIL', 'EACCES', 'ENOTFOUND', 'EAI_AGAIN', 'EAI_NONAME']);

/**
 * Run `start`; a bind error (address in use, not available, not permitted, host unknown) on an
 * address one of `flags` gave is rethrown with that flag's name and value in front.
 */
export async function namingListenFlags<T>(flags: readonly ListenFlag[], start: () => Promise<T>): Promise<T> {
  try {
    return await start();
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { address?: string; port?: number; hostname?: string };
    if (!e || !BIND_ERRORS.has(e.code ?? '')) throw err;
    const host = e.address ?? e.hostname;
    const named = flags.filter((f) => {
      if (f.value === '') return false;
      const p = parseListenAddress(f.value);
      return p.host === host && (e.port === undefined || e.port === p.port);
    });
    if (named.length === 0) throw err;
    const what = named.map((f) => `${f.flag} ${f.value}`).join(', ');
    throw new Error(`${what}: ${describeBindError(e)}`, { cause: err });
  }
}

function describeBindError(e: NodeJS.ErrnoException): string {
  switch (e.code) {
    case 'EADDRINUSE':
      return 'address already in use (is another waypoint or demo running?)';
    case 'EADDRNOTAVAIL':
      return 'address not available (no interface of this machine has that IP)';
    case 'EACCES':
      return 'permission denied (ports below 1024 need privileges)';
    default:
      return `host not found (${e.code})`;
  }
}

/**
 * Write this process's PID to `file` (`--pid-file`), now that it is listening, and remove the file
 * when the process exits (only if it still holds this PID). `kill -TERM $(cat FILE)` then reaches
 * the waypoint itself, not a wrapper such as `npx` that would not pass the signal on.
 */
export function writePidFile(file: string): void {
  const pid = String(process.pid);
  try {
    fs.writeFileSync(file, `${pid}\n`);
  } catch (err) {
    throw new Error(`--pid-file ${file}: ${(err as Error).message}`, { cause: err });
  }
  process.once('exit', () => {
    try {
      if (fs.readFileSync(file, 'utf8').trim() === pid) fs.unlinkSync(file);
    } catch {
      // Already gone or replaced: nothing of ours to remove.
    }
  });
}

/**
 * `--ca FILE` must be the mesh root: a CA certificate, not a key or a workload's leaf (which
 * would fail later, at the first handshake, as "self-signed certificate in certificate chain").
 * `hint` says what to give instead (default: the local CA's root-cert.pem).
 * @throws Error naming the flag, the file and what it holds instead.
 */
export async function checkTrustRoot(file: string, hint?: string): Promise<void> {
  try {
    await readTrustRoot(file, hint);
  } catch (err) {
    throw new Error(`--ca ${file}: ${(err as Error).message}`, { cause: err });
  }
}
