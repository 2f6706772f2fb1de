# node-waypoint: an Istio-ambient waypoint proxy.
# Build: docker build -t node-waypoint .
# Run:   docker run --rm -v $PWD/mesh.yaml:/etc/waypoint/mesh.yaml -v waypoint-state:/var/lib/waypoint node-waypoint
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Runtime dependencies only: the image's own Node 24 runs the TypeScript sources by type stripping.
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    WAYPOINT_STATE_DIR=/var/lib/waypoint
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY bin ./bin
COPY src ./src
COPY filters ./filters
RUN mkdir -p /var/lib/waypoint && chown node:node /var/lib/waypoint
USER node
# 15008 HBONE, 15020 admin/metrics, 15021 readiness (as Istio's waypoint).
EXPOSE 15008 15020 15021
ENTRYPOINT ["node", "bin/waypoint.js"]
CMD ["run", "--mesh", "/etc/waypoint/mesh.yaml", "--admin", "0.0.0.0:15020"]
