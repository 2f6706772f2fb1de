/**
 * Process-wide helpers with no knowledge of the mesh: the logger, deep freezing, the waypoint's error
 * types (ConfigError with a file position), listen addresses, computations run in slices, retry
 * backoff, and the protobuf descriptor DSL for the messages the project declares itself.
 */
export { log, setLogLevel } from './log.ts';
export { ConfigError, WaypointError, type ConfigLocation } from './errors.ts';
export { deepFreeze, deepFreezeStepwise } from './freeze.ts';
export { listenOn, parseListenAddress } from './listen.ts';
export { runInSlices, runNow, type Stepwise } from './slices.ts';
export { LogLimiter } from './log-limiter.ts';
export { VERSION } from './version.ts';
export { Backoff, type BackoffSettings } from './backoff.ts';
export { enumField, enumType, field, mapField, messageRegistry, msgField, protoFile, ProtoType, RPC_STATUS_FILE, type EnumInit, type FieldInit, type MessageInit } from './proto.ts';
export { settleWithin } from './settle.ts';
