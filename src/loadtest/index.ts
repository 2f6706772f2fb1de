/**
 * The load generator (`waypoint loadtest`, and `npm run bench` built on it): HBONE client side
 * (CONNECT tunnels through a waypoint with a mesh identity) or plain TCP, HTTP/1.1, h2c or gRPC
 * inside, open loop at a fixed rate (latency corrected for coordinated omission) or closed loop;
 * the waypoint's CPU and memory; JSON results in fortio's shape, HTML reports with SVG charts, and
 * comparisons of two results.
 */
export { DEFAULT_CAPS, LoadtestUsageError, PROTOCOLS, checkLoopback, parseDuration, resolveSettings, type LoadtestFlags, type LoadtestSettings, type Protocol } from './options.ts';
export { hboneTransport, tcpTransport, type Transport } from './transport.ts';
export type { Outcome, RequestSpec } from './protocols.ts';
export { LoadProbeError, runLoad, type LoadHooks, type LoadPlan, type LoadResult, type Progress } from './engine.ts';
export { countAbove, summarize, type IntervalSample, type LatencySummary } from './recorder.ts';
export { clockTicks, cpuSeconds, processTree, rssKiB, sumOverTree, treeUsage } from './proc.ts';
export { ResourceMonitor, PrometheusWatch, type ResourceReport, type PrometheusReport } from './monitor.ts';
export { parsePrometheus, diffPrometheus } from './prometheus.ts';
export { SCHEMA, buildReport, incompleteOf, readReport, type LoadtestReport } from './result.ts';
export { renderReport } from './html.ts';
export { checkComparable, compareReports, formatComparison, renderCompare, type Comparison } from './compare.ts';
export { progressDisplay, type ProgressDisplay } from './progress.ts';
export { runLoadtest, type ClientIdentity, type RunOptions } from './run.ts';
export { formatSummary } from './summary.ts';
export { inClusterIdentity, tokenSubject, type InClusterOptions } from './istiod-ca.ts';
