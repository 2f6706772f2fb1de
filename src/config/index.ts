/**
 * The bootstrap configuration (`--config waypoint.yaml`): the proxy's own settings, as opposed to the
 * mesh state. Parsed and validated once into a deep-frozen {@link BootstrapConfig}.
 *
 *   const cfg = overrideBootstrap(await loadBootstrap(file), flags);
 */
export type { BootstrapConfig } from './bootstrap.ts';
export { loadBootstrap, overrideBootstrap, defaultBootstrap } from './bootstrap.ts';
