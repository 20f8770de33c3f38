# syntax=docker/dockerfile:1
# Social Posts API image. Build: docker build -t social-posts .   (skaffold builds it the same way)

# Exact Node 24 LTS release; bump deliberately (and with it the engines field). Debian 13 trixie
# rather than 12 bookworm: bookworm left Debian's regular security support in June 2026 (LTS only
# since), trixie is the current stable with full support, and the official node image's default
# variant since nodejs/docker-node#2558 (July 2026).
# `npm run image:build` builds this file as it is (tools/image.ts).
ARG NODE_IMAGE=node:24.21.0-trixie-slim

# --- build: all dependencies, compile TypeScript to dist/ ---
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY service/src ./service/src
COPY migrations ./migrations
RUN npm run build

# --- deps: production dependencies only (bcrypt brings prebuilt binaries, no toolchain needed) ---
# Optional dependencies are the embedded database (PGlite, ~27 MB): the chart always sets
# DB_HOSTNAME, and the service loads PGlite only without it (it says so at start-up if asked to).
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --omit=optional --no-audit --no-fund && npm cache clean --force

# --- dev: `skaffold dev`'s image (target dev), never shipped: the TypeScript sources, every
# dependency, and node's watch mode restarting the service when skaffold syncs a file in ---
# The same first instructions as the build stage, so both share the `npm ci` layer.
FROM ${NODE_IMAGE} AS dev
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
# Owned by the service user: skaffold's sync unpacks changed files here as that user.
COPY --chown=1000:1000 service/src ./service/src
COPY --chown=1000:1000 migrations ./migrations
# A watch restart needs no drain (no proxy routes around the old process); the chart's value wins.
# skaffold's sync runs `tar xmf`: GNU tar would replace each file by a new one, which node's
# watcher on Linux stops seeing after the first time; overwritten in place, every edit is seen.
ENV PORT=8000 \
    SHUTDOWN_DELAY_SECONDS=0 \
    TAR_OPTIONS=--overwrite
USER 1000:1000
# The API, metrics, and the inspector `skaffold debug` opens (it adds --inspect after `node`).
EXPOSE 8000 9464 9229
# A migration is a file in migrations/ plus its line in migrations/index.ts: both restart the
# service, whose start-up runs the pending migrations.
CMD ["node", "--watch-path=service/src", "--watch-path=migrations", "--import", "tsx", "service/src/main.ts"]

# --- e2e: k8s-tests/suite in a container, what `skaffold verify` runs against the release ---
FROM ${NODE_IMAGE} AS e2e
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY jest.config.mjs ./
COPY tools/harness ./tools/harness
COPY k8s-tests/sequencer.mjs k8s-tests/report.ts ./k8s-tests/
COPY k8s-tests/suite ./k8s-tests/suite
USER 1000:1000
CMD ["node_modules/.bin/jest", "--selectProjects", "k8s", "--runInBand", "--verbose", "k8s-tests/suite/"]

# --- runtime: node, production node_modules and dist/ only ---
FROM ${NODE_IMAGE} AS runtime
# The package managers are not needed at run time; removing them shrinks what an attacker could use.
RUN rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack \
      /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
      /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-*
ENV NODE_ENV=production \
    PORT=8000
WORKDIR /app
# Files stay owned by root: the service user can read but never modify its own code.
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# Numeric uid of the image's "node" user, so Kubernetes can verify runAsNonRoot.
USER 1000:1000
# The API, and Prometheus metrics on a port of their own (METRICS_PORT).
EXPOSE 8000 9464
# node as PID 1 receives SIGTERM directly (no npm or shell in between) and runs the graceful shutdown.
CMD ["node", "dist/service/src/main.js"]
