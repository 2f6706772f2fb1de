/**
 * Process-wide helpers with no knowledge of the mesh: the logger, deep freezing, the waypoint's error
 * types (ConfigError with a file position), listen addresses, and computations run in slices.
 */
export { log, setLogLevel } from './log.ts';
export { ConfigError, WaypointError, type ConfigLocation } from './errors.ts';
export { deepFreeze, deepFreezeStepwise } from './freeze.ts';
export { listenOn, parseListenAddress } from './listen.ts';
export { runInSlices, runNow, type Stepwise } from './slices.ts';
export { LogLimiter } from './log-limiter.ts';
export { VERSION } from './version.ts';
