# syntax=docker/dockerfile:1
#
# epd-coordinator image: `docker build -t epd-coordinator:0.1.0 .`
# Run it with a config mounted at /etc/epd-coordinator/coordinator.yaml (listen on 0.0.0.0, not
# loopback), e.g. config/k8s/coordinator-config.yaml. test/deploy/docker/ replays the runtime stage's
# steps without a Docker engine; keep the RUN lines to the ones it knows (npm ci, npm run build).

# Pin by digest in production; the tags keep Node 24 LTS (package.json engines; the ext_proc
# listener's HTTP/2 stream-reset budget, server.stream_reset_burst/rate, is not in Node 20).
ARG BUILD_IMAGE=node:24-bookworm-slim
ARG RUNTIME_IMAGE=gcr.io/distroless/nodejs24-debian12:nonroot

# ---- build: every dependency, TypeScript -> dist/ -----------------------------------------------
FROM ${BUILD_IMAGE} AS build
WORKDIR /app
# Lock file first: the install layer is reused until dependencies change.
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build

# ---- deps: production dependencies only ---------------------------------------------------------
FROM ${BUILD_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts: every runtime dependency is plain JavaScript (protobufjs's postinstall only
# checks its optional CLI).
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# ---- runtime: no shell, no package manager, no compiler -----------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
WORKDIR /app
ENV NODE_ENV=production
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
# The ext_proc .proto files are loaded at start-up, found by walking up from dist/src.
COPY proto ./proto
# The sample config, for reference (`--config config/coordinator.yaml` listens on loopback only).
COPY config/coordinator.yaml ./config/coordinator.yaml
# distroless "nonroot"; numeric so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# gRPC ext_proc (server.listen_addr) and Prometheus /metrics (server.metrics_addr, planned).
EXPOSE 50051 9464
# V8's young generation capped at 4 MiB a semi-space, the old generation grown by half its live
# size between full collections, and the memory reducer's collections without V8's reduce-memory
# mode, which threw our optimised code away, and no allocation-site pretenuring, which after a burst
# of load put the request path's short-lived objects straight into the old generation
# (launch/service-node-flags.ts; README, Performance: memory). Node refuses all but the first in
# NODE_OPTIONS, so all four live here (the chart and config/k8s set only the old generation's limit
# there); command-line flags win over NODE_OPTIONS.
ENTRYPOINT ["/nodejs/bin/node", "--max-semi-space-size=4", "--heap-growing-percent=50", "--no-memory-reducer-favors-memory", "--no-allocation-site-pretenuring", "dist/src/main.js"]
CMD ["--config", "/etc/epd-coordinator/coordinator.yaml"]
