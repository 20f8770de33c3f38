import { createServer, type Server } from 'node:http';
import type { Request, RequestHandler } from 'express';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { backfillState, type BackfillState } from './db/backfill';
import { DATABASE_CHECK_TIMEOUT_MS, withTimeout, type Database } from './db/connection';
import { registerReadMetrics } from './db/standbys';
import { knownMigrations, migrationState as readMigrationState, type MigrationState } from './db/migrator';
import type { TokenChecks } from './http/auth';
import { settledStatus } from './http/pipelining';
import type { Logger } from './logger';

/** The route label of requests no route matched (unknown paths, preflights): one value, whatever the path. */
const UNMATCHED_ROUTE = 'unmatched';

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

export interface Metrics {
  registry: Registry;
  /** Times every request by route template, method and status, and counts those in flight. */
  httpMiddleware: RequestHandler;
  /** Where the token metrics (auth_token_*) are read at scrape time: the app's authentication. */
  observeTokenChecks(read: () => TokenChecks): void;
}

/**
 * The route template a request matched (`/posts/:id`), never the raw path: ids in label values
 * would make a new time series per post. Files served under a mounted path (the /docs assets)
 * share one `<mount>/*` label; everything else unmatched shares one label too.
 */
function routeLabel(req: Request): string {
  const route = req.route as { path?: unknown } | undefined;
  const path = Array.isArray(route?.path) ? (route.path as unknown[])[0] : route?.path;
  if (typeof path === 'string') return `${req.baseUrl}${path}`;
  if (req.baseUrl !== '') return `${req.baseUrl}/*`;
  return UNMATCHED_ROUTE;
}

/** knex's tarn pool; absent once the database is closed. */
interface Pool {
  max: number;
  numUsed(): number;
  numFree(): number;
  numPendingAcquires(): number;
}

function poolOf(db: Database): Pool | undefined {
  return (db.knex.client as { pool?: Pool | null }).pool ?? undefined;
}

/**
 * A registry of its own per app (tests build many apps in one process) holding the request
 * metrics, the database pool and migration state read at scrape time, and prom-client's process
 * and event-loop metrics.
 */
export function createMetrics(db: Database, logger: Logger): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const httpMiddleware = requestMetrics(registry);
  registerPoolMetrics(registry, db);
  registerReadMetrics(registry, () => db.reads);
  registerSchemaMetrics(registry, db, logger);
  return { registry, httpMiddleware, observeTokenChecks: registerTokenMetrics(registry) };
}

/** Times every request by route template, method and status, and counts those in flight. */
function requestMetrics(registry: Registry): RequestHandler {
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from request to response, by route template, method and status code (499: the client closed the connection before the answer was sent).',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const inFlight = new Gauge({
    name: 'http_requests_in_flight',
    help: 'Requests received and not yet answered.',
    registers: [registry],
  });

  return (req, res, next) => {
    const end = duration.startTimer();
    inFlight.inc();
    // 'close' comes for every request, answered or abandoned by the client, exactly once, also
    // for a pipelined one abandoned before its turn (pipelining.ts); abandoned ones are 499.
    res.once('close', () => {
      inFlight.dec();
      end({
        method: METHODS.has(req.method) ? req.method : 'other',
        route: routeLabel(req),
        status_code: String(settledStatus(res)),
      });
    });
    next();
  };
}

/** The pool of the primary's connections, read at scrape time. */
function registerPoolMetrics(registry: Registry, db: Database): void {
  const poolGauge = (name: string, help: string, read: (pool: Pool) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        const pool = poolOf(db);
        this.set(pool ? read(pool) : 0);
      },
    });
  poolGauge('db_pool_connections_used', 'Database connections lent to queries.', (p) => p.numUsed());
  poolGauge('db_pool_connections_idle', 'Open database connections waiting for a query.', (p) => p.numFree());
  poolGauge(
    'db_pool_acquires_pending',
    'Queries waiting for a database connection (sustained values: the pool is too small or the database slow).',
    (p) => p.numPendingAcquires(),
  );
  poolGauge(
    'db_pool_connections_max',
    'Most database connections of this process (DB_POOL_MAX; 1 for the embedded database).',
    (p) => p.max,
  );
}

/** Migration and backfill state, one query each per scrape. */
function registerSchemaMetrics(registry: Registry, db: Database, logger: Logger): void {
  // One query per scrape, shared by the gauges below (the registry collects them concurrently).
  const perScrape = <T>(what: string, read: () => Promise<T>) => {
    let reading: Promise<T | undefined> | undefined;
    return () => {
      // A scrape must not hang on a database that does not answer.
      reading ??= withTimeout(read(), DATABASE_CHECK_TIMEOUT_MS, 'the database did not answer')
        .catch((error: unknown) => {
          logger.debug({ err: error }, `metrics: ${what} not readable`);
          return undefined;
        })
        .finally(() => {
          reading = undefined;
        });
      return reading;
    };
  };
  const migrationState = perScrape('migration state', () => readMigrationState(db));
  const backfills = perScrape('backfill state', () => backfillState(db));
  const backfillGauge = (name: string, help: string, read: (state: BackfillState) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['backfill'] as const,
      registers: [registry],
      async collect() {
        // As with the migrations: when the database does not answer, the last values stay.
        for (const state of (await backfills()) ?? []) this.set({ backfill: state.name }, read(state));
      },
    });
  backfillGauge(
    'db_backfill_pending',
    "1 while a migration's background backfill has rows left to fill, 0 once it has finished.",
    (s) => (s.pending ? 1 : 0),
  );
  backfillGauge(
    'db_backfill_rows_done',
    "Rows a migration's background backfill has filled so far, by every replica.",
    (s) => s.rowsDone,
  );

  const migrationGauge = (name: string, help: string, read: (state: MigrationState) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const state = await migrationState();
        // When the database does not answer, the last value read stays (readiness reports the outage).
        if (state) this.set(read(state));
      },
    });
  new Gauge({
    name: 'db_migrations_known',
    help: 'Migrations this build of the service ships.',
    registers: [registry],
  }).set(knownMigrations().length);
  migrationGauge(
    'db_migrations_applied',
    'Migrations recorded as applied in the database.',
    (s) => s.applied,
  );
  migrationGauge(
    'db_migrations_pending',
    'Migrations of this build not yet applied to the database.',
    (s) => s.pending,
  );
  migrationGauge('db_schema_up_to_date', '1 when every migration of this build is applied, else 0.', (s) =>
    s.pending === 0 ? 1 : 0,
  );
  migrationGauge(
    'db_migration_last_applied_timestamp_seconds',
    'When the latest migration was applied (Unix time).',
    (s) => s.lastAppliedSeconds,
  );
}

/** auth_token_*: counted by the authentication itself (plain numbers, no label look-up per request), read here. */
function registerTokenMetrics(registry: Registry): Metrics['observeTokenChecks'] {
  let tokenChecks: (() => TokenChecks) | undefined;
  new Counter({
    name: 'auth_token_checks_total',
    help: 'Bearer tokens checked: cached (a token verified before, found in the cache), verified (checked in full and accepted), refused (missing, malformed, forged, expired, or of no accepted key).',
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const checks = tokenChecks?.();
      if (!checks) return;
      this.reset();
      for (const result of ['cached', 'verified', 'refused'] as const) this.inc({ result }, checks[result]);
    },
  });
  new Gauge({
    name: 'auth_token_cache_entries',
    help: 'Verified tokens held for a look-up on their next use (at most auth_token_cache_capacity).',
    registers: [registry],
    collect() {
      this.set(tokenChecks?.().held ?? 0);
    },
  });
  new Gauge({
    name: 'auth_token_cache_capacity',
    help: 'Most verified tokens held (TOKEN_CACHE_SIZE); when full, further tokens are checked in full on every request.',
    registers: [registry],
    collect() {
      this.set(tokenChecks?.().capacity ?? 0);
    },
  });

  return (read) => {
    tokenChecks = read;
  };
}

/** GET /metrics in the Prometheus text format, on a listener of its own; nothing else answers there. */
export function createMetricsServer(registry: Registry, logger: Logger): Server {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('Not Found: metrics are at GET /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => {
        res.writeHead(200, { 'Content-Type': registry.contentType, 'Cache-Control': 'no-store' });
        res.end(req.method === 'HEAD' ? undefined : text);
      },
      (error: unknown) => {
        logger.error({ err: error }, 'metrics: collection failed');
        res.writeHead(500, { 'Content-Type': 'text/plain' }).end('metrics collection failed\n');
      },
    );
  });
  // Scrapes are short; Prometheus keeps its connection alive between them.
  server.keepAliveTimeout = 65_000;
  return server;
}
