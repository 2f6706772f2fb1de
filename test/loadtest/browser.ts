/**
 * Open an HTML file in a real headless browser, Debian's chromium (`apt-get install chromium`;
 * .ci/run installs it): the DOM after its scripts ran (`--dump-dom`) and every console message,
 * script errors included (`--enable-logging=stderr --v=0` prints them as `CONSOLE` lines).
 *
 * Without chromium the browser tests fail on CI (`CI` set) with how to install it, and are skipped
 * on a developer machine (they still run everything else).
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

/** The chromium binary (`CHROMIUM` or the first of chromium / chromium-browser on PATH), or undefined. */
export function findChromium(): string | undefined {
  for (const c of [process.env.CHROMIUM, 'chromium', 'chromium-browser'].filter((x): x is string => !!x)) {
    if (spawnSync(c, ['--version'], { stdio: 'ignore', timeout: 20_000 }).status === 0) return c;
  }
  return undefined;
}

export const CHROMIUM = findChromium();

/** Skip the browser tests only off CI; on CI a missing chromium is a failure. */
export const skipBrowser = CHROMIUM === undefined && !process.env.CI;

export function requireChromium(): string {
  if (!CHROMIUM) throw new Error('chromium is not installed: the HTML report is checked in a real browser (apt-get install -y chromium; .ci/run does it)');
  return CHROMIUM;
}

/** Load `file` headless: the serialized DOM once scripts ran, and the console lines. */
export function openInBrowser(file: string, timeoutMs = 60_000): Promise<{ dom: string; console: string[] }> {
  const bin = requireChromium();
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-chromium-'));
  const args = ['--headless', '--disable-gpu', '--no-sandbox', '--no-first-run', '--disable-dev-shm-usage', `--user-data-dir=${profile}`, '--enable-logging=stderr', '--v=0', '--dump-dom', pathToFileURL(file).href];
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let dom = '';
    let err = '';
    p.stdout.on('data', (c: Buffer) => (dom += c));
    p.stderr.on('data', (c: Buffer) => (err += c));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('close', (code) => {
      clearTimeout(timer);
      fs.rmSync(profile, { recursive: true, force: true });
      if (code !== 0 || dom === '') return reject(new Error(`chromium exited ${code} without a DOM:\n${err.slice(-2000)}`));
      resolve({ dom, console: err.split('\n').filter((l) => l.includes(':CONSOLE')) });
    });
  });
}

/** The `<figure class="chart" id=…>` elements of a dumped DOM: id → its markup. */
export function chartsOf(dom: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of dom.matchAll(/<figure class="chart" id="([^"]+)">([\s\S]*?)<\/figure>/g)) out.set(m[1], m[2]);
  return out;
}
