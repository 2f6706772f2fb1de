/**
 * The version of node-waypoint, read from its package.json (which the image ships), for
 * `waypoint --version` and the default image tag of `waypoint generate`.
 */
import fs from 'node:fs';

/** `version` of the package.json at the root of this package. */
export const VERSION: string = (JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
