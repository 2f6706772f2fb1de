/**
 * The admin server (Istio's 15020 / Envoy admin, reduced: `/healthz/ready`, `/stats/prometheus`,
 * `/config_dump`), also the readiness server on 15021; and the routing part of `/config_dump`.
 */
export { routingConfigDump } from './config-dump.ts';
export { AdminServer } from './server.ts';
