/**
 * A gRPC ext_authz server in a process of its own, allowing every check (the tests kill it with
 * SIGTERM to see the waypoint get over a provider restart). `node grpc-authz-process.ts <ip:port>`;
 * prints `ready` once listening.
 */
import { startGrpcAuthz } from './helpers.ts';

const address = process.argv[2];
if (!address) throw new Error('usage: grpc-authz-process.ts <ip:port>');
await startGrpcAuthz(address, () => ({ kind: 'respond', response: { status: { code: 0 } } }));
process.stdout.write('ready\n');
