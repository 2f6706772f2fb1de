/** Runs h2_peer.py (python3-h2, a misbehaving HBONE client) against a waypoint. */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * Run h2_peer.py in `mode` with count `n` against `hostPort`, as the identity whose PEM files are
 * `<topoDir>/py-cert.pem` and `py-key.pem` (trusting `<topoDir>/ca/root-cert.pem`); its JSON result.
 */
export async function h2peer(topoDir: string, hostPort: [string, number], authority: string, mode: string, n: number): Promise<Record<string, unknown>> {
  const { stdout } = await promisify(execFile)(
    '/usr/bin/python3',
    [path.join(import.meta.dirname, 'h2_peer.py'), hostPort[0], String(hostPort[1]), path.join(topoDir, 'py-cert.pem'), path.join(topoDir, 'py-key.pem'), path.join(topoDir, 'ca', 'root-cert.pem'), authority, mode, String(n)],
    { timeout: 20_000 },
  );
  return JSON.parse(stdout.trim().split('\n').pop()!);
}

