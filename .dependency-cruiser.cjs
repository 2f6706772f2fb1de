/**
 * The layering rules of README "How it works" (the same table), checked by `npm test`
 * (dependency-cruiser: `npm run lint:layers`).
 *
 * Each folder of src/ is a layer with one public entry, index.ts. A layer imports only the entries
 * of the layers listed for it below (its own files import each other directly, never through their
 * own index.ts); filters/* see only the filter API and the engines' entries; nothing imports in a
 * cycle. Lower layers never import higher ones: the table is in layer order.
 */
const LAYERS = {
  util: [], // log, freeze, errors, listen, slices, backoff, protobuf descriptors
  identity: ['util'], // SPIFFE ids, the local CA, workload certificates
  config: ['util', 'identity'], // the bootstrap file
  state: ['util', 'identity'], // mesh state: parse, validate, compiled parts, immutable snapshots, store
  kube: ['util', 'identity', 'config', 'state'], // the Kubernetes API as a mesh source: watched kinds, informers, RBAC, live store
  istiod: ['util', 'identity', 'config', 'state'], // istiod's CA and WDS (delta ADS) clients, WDS → mesh model
  pipeline: ['util', 'identity', 'state'], // the filter API: contexts, chain, local replies, response flags
  peer: ['util', 'identity', 'state', 'pipeline'], // peer metadata (baggage, x-envoy-peer-metadata) and its slots
  authz: ['util', 'identity', 'state', 'pipeline', 'peer'], // AuthorizationPolicy engine (no I/O)
  authn: ['util', 'identity', 'state', 'pipeline', 'peer', 'authz'], // RequestAuthentication (JWT)
  netpol: ['util', 'identity', 'state', 'pipeline', 'peer'], // NetworkPolicy
  routing: ['util', 'identity', 'state', 'pipeline', 'peer'], // HTTPRoute/GRPCRoute, DestinationRule traffic policy
  tracing: ['util', 'identity', 'state', 'pipeline', 'peer'], // Telemetry API (compiled per snapshot), spans: propagation, sampling, OTLP export
  extensions: ['util', 'identity', 'state', 'pipeline', 'routing'], // WaypointFilter: user filter modules, attachment, isolation
  telemetry: ['util', 'identity', 'state', 'pipeline', 'peer', 'tracing'], // access log, metrics
  hbone: ['util', 'identity', 'state'], // HBONE server, session pool, relay, HTTP/2 settings
  upstream: ['util', 'identity', 'state', 'pipeline', 'peer', 'routing', 'hbone'], // clusters, LB, pools, h2 upstream, failures
  'ext-authz': ['util', 'identity', 'state', 'pipeline', 'authz', 'hbone', 'upstream'], // ext_authz client (gRPC/HTTP)
  router: ['util', 'identity', 'state', 'pipeline', 'peer', 'netpol', 'routing', 'telemetry', 'hbone', 'upstream'], // HTTP router, TCP proxy
  'inner-http': ['util', 'identity', 'state', 'pipeline', 'telemetry', 'hbone'], // HTTP connection manager inside a tunnel
  listener: ['util', 'identity', 'state', 'pipeline', 'netpol', 'telemetry', 'hbone', 'inner-http'], // CONNECT → filter chain
  ztunnel: ['util', 'identity', 'state', 'pipeline', 'peer', 'authz', 'netpol', 'hbone', 'upstream'], // tunnel/inbound role stand-ins
  admin: ['util', 'state', 'routing', 'telemetry', 'upstream'], // admin server (stats, config_dump)
  deploy: ['kube'], // the Kubernetes objects of a namespace waypoint (waypoint generate, deploy/base); RBAC from kube's watched kinds
  loadtest: ['util', 'identity', 'state', 'hbone'], // load generator: HBONE client side, reports
};
// Above the table: src/app.ts (wires the waypoint) with the modules next to it (the sources of each
// mode: sources.ts, file-sources.ts, cluster-sources.ts, cluster-env.ts) < src/workers/ (runs it in
// several processes) < src/demo/ < src/cli/, which may import every layer's entry.
// Filters see the filter API and the engines' entries only. tracing is one: it compiles the
// Telemetry API per snapshot (what istio.stats and istio.tracing read per tunnel) and owns spans.
const FILTER_MAY_USE = ['util', 'identity', 'state', 'pipeline', 'peer', 'authz', 'authn', 'netpol', 'tracing'];

const entry = (layer) => `^src/${layer}/index\\.ts$`;
const layerRules = Object.entries(LAYERS).map(([layer, allowed]) => ({
  name: `layer-${layer}`,
  comment: `src/${layer}/ may import only ${allowed.length ? allowed.map((l) => `src/${l}/index.ts`).join(', ') : 'nothing else of src/'}`,
  severity: 'error',
  from: { path: `^src/${layer}/` },
  to: { path: '^(src|filters)/', pathNot: [`^src/${layer}/`, ...allowed.map(entry)] },
}));

module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', comment: 'no import cycles', from: {}, to: { circular: true } },
    { name: 'resolvable', severity: 'error', comment: 'every import resolves to a file', from: {}, to: { couldNotResolve: true } },
    ...layerRules,
    {
      name: 'only-via-entry',
      comment: 'another layer is reached only through its index.ts',
      severity: 'error',
      from: { path: '^src/([^/]+)/' },
      to: { path: '^src/[^/]+/', pathNot: ['^src/[^/]+/index\\.ts$', '^src/$1/'] },
    },
    {
      name: 'only-via-entry-top',
      comment: 'src/app.ts and filters/ reach a layer only through its index.ts',
      severity: 'error',
      from: { path: '^(src/[^/]+\\.ts$|filters/)' },
      to: { path: '^src/[^/]+/', pathNot: '^src/[^/]+/index\\.ts$' },
    },
    {
      name: 'not-own-entry',
      comment: "a layer's files import each other directly, not through their own index.ts",
      severity: 'error',
      from: { path: '^src/([^/]+)/', pathNot: '^src/[^/]+/index\\.ts$' },
      to: { path: '^src/$1/index\\.ts$' },
    },
    {
      name: 'top-app-demo-cli',
      comment: 'src/app.ts (and the files next to it) < src/demo/ < src/cli/',
      severity: 'error',
      from: { path: '^src/([^/]+\\.ts$|demo/)' },
      to: { path: '^src/cli/' },
    },
    {
      name: 'top-app-below-workers',
      comment: 'src/app.ts < src/workers/',
      severity: 'error',
      from: { path: '^src/app\\.ts$' },
      to: { path: '^src/workers/' },
    },
    {
      name: 'top-workers-below-demo-cli',
      comment: 'src/workers/ < src/demo/, src/cli/',
      severity: 'error',
      from: { path: '^src/workers/' },
      to: { path: '^src/(demo|cli)/' },
    },
    {
      name: 'top-app-below-demo',
      comment: 'src/app.ts (and the files next to it) < src/demo/',
      severity: 'error',
      from: { path: '^src/[^/]+\\.ts$' },
      to: { path: '^src/demo/' },
    },
    {
      name: 'filters-see-the-filter-api',
      comment: `filters/ import only ${FILTER_MAY_USE.map((l) => `src/${l}/index.ts`).join(', ')}`,
      severity: 'error',
      from: { path: '^filters/' },
      to: { path: '^src/', pathNot: FILTER_MAY_USE.map(entry) },
    },
    {
      name: 'filters-are-independent',
      comment: 'a filter imports only its own files: not another filter, nor a file directly under filters/',
      severity: 'error',
      from: { path: '^filters/([^/]+)/' },
      to: { path: '^filters/', pathNot: ['^filters/$1/'] },
    },
    {
      name: 'filters-registry-only',
      comment: "the registry (filters/index.ts) imports each filter through its index.ts",
      severity: 'error',
      from: { path: '^filters/index\\.ts$' },
      to: { path: '^filters/', pathNot: ['^filters/[^/]+/index\\.ts$'] },
    },
    {
      name: 'filters-top-only-registry',
      comment: 'a file directly under filters/ other than the registry (filters/index.ts) imports no filter',
      severity: 'error',
      from: { path: '^filters/[^/]+$', pathNot: '^filters/index\\.ts$' },
      to: { path: '^filters/' },
    },
    {
      name: 'src-sees-filter-entries',
      comment: "src/ reaches the filters only through filters/index.ts (the registry) or a filter's index.ts",
      severity: 'error',
      from: { path: '^src/' },
      to: { path: '^filters/', pathNot: ['^filters/index\\.ts$', '^filters/[^/]+/index\\.ts$'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|test|bench)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'], exportsFields: ['exports'], conditionNames: ['import', 'node', 'default'] },
  },
};
