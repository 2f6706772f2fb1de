/**
 * The terminal filters, beside each other as in Envoy: the HTTP router (`envoy.filters.http.router`:
 * routing decision, retries, upstream attempts) and the TCP proxy (`tcp_proxy`: relays TCP
 * tunnels). Both lease endpoints through the upstream layer and map failures with upstream/failure.ts.
 *
 *   registry.register(routerFactory(clusters, { requestTimeoutMs, appendForwardedFor, retry }));
 *   waypointConnectHandler({ ..., tcp: new TcpProxy(clusters) });
 */
export { DEFAULT_ROUTER_OPTIONS, type RetryPolicy, type RouterOptions } from './retry-policy.ts';
export { ROUTER_FILTER_NAME, routerFactory, type RouterHooks } from './router.ts';
export { TcpProxy } from './tcp-proxy.ts';
