/**
 * Writes deploy/base from src/deploy (`npm run deploy:base`): the objects `waypoint generate
 * --namespace default` prints, a file per kind of object, and the kustomization.yaml listing them.
 * test/deploy/manifests.test.ts fails when the files differ from what this would write.
 */
import fs from 'node:fs';
import path from 'node:path';
import { kustomizeBase } from '../src/deploy/index.ts';
import { VERSION } from '../src/util/index.ts';

const dir = path.join(import.meta.dirname, 'base');
fs.mkdirSync(dir, { recursive: true });
const files = kustomizeBase(VERSION);
for (const stale of fs.readdirSync(dir)) if (!files.has(stale)) fs.rmSync(path.join(dir, stale));
for (const [file, text] of files) fs.writeFileSync(path.join(dir, file), text);
process.stdout.write(`wrote ${[...files.keys()].map((f) => path.join('deploy/base', f)).join(', ')}\n`);
