# node-waypoint for a Kubernetes cluster: `waypoint run --cluster` (identity from istiod's CA,
# workloads from istiod, config from the Kubernetes API; it never creates a local CA).
# Build: docker build -t node-waypoint:0.1.0 .   Deploy: waypoint generate --namespace NS | kubectl apply -f -
#
# The base is pinned to the exact Node of the `node` devDependency (package.json): the waypoint is
# tested on that version, and Node runs the TypeScript sources by type stripping.
FROM node:24.21.0-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Runtime dependencies only (test/deploy/runtime-deps.test.ts: nothing under src/ needs a devDependency).
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:24.21.0-bookworm-slim
# HOME: the UID below has no passwd entry, and /tmp is the pod's writable emptyDir.
# MALLOC_ARENA_MAX: glibc's per-thread malloc arenas keep freed native memory (TLS, nghttp2, HTTP
# parsers) per thread; two arenas hold idle tunnels and released bursts in far less RSS at no
# measurable CPU cost (bench/README.md, "Reading the figures").
ENV NODE_ENV=production \
    HOME=/tmp \
    MALLOC_ARENA_MAX=2
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
# Only what runs: no tests, benchmarks, manifests or docs (.dockerignore keeps them out of the context too).
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY filters ./filters
# Istio's proxy UID, numeric so Kubernetes can check runAsNonRoot; the Deployment runs as the same.
USER 1337:1337
# 15008 HBONE, 15020 metrics (admin), 15021 status (readiness, liveness), as Istio's waypoint.
EXPOSE 15008 15020 15021
# No HEALTHCHECK: Kubernetes probes /healthz/ready and /healthz/live on 15021.
ENTRYPOINT ["node", "/app/bin/waypoint.js"]
CMD ["run", "--cluster"]
