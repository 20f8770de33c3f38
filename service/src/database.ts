import { mkdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Extension, PGlite } from '@electric-sql/pglite';
import knex, { type Knex } from 'knex';
import { Client, type ClientConfig } from 'pg';
import { migrations } from '../../migrations';
import type { Logger } from './logger';
import type { Settings } from './settings';

export interface Database {
  knex: Knex;
  kind: 'postgres' | 'embedded';
  /** Runs `work` while no other process sharing this database runs its own `exclusive` work. */
  exclusive<T>(work: () => Promise<T>, waitMs: number, onWait?: () => void): Promise<T>;
  close(): Promise<void>;
}

interface EmbeddedModules {
  PGlite: typeof PGlite;
  pg_trgm: Extension;
  ClientPgLite: typeof knex.Client;
}

/**
 * The embedded database's packages are optional dependencies, loaded only when DB_HOSTNAME is
 * unset: the production image leaves them out (about 27 MB) because the chart always names a
 * PostgreSQL server, and there the read-only root filesystem would refuse PGlite's files anyway.
 */
function loadEmbedded(): EmbeddedModules {
  try {
    /* eslint-disable @typescript-eslint/no-require-imports -- loaded on demand, see above; the
       package's contrib typings are ESM-only although a CommonJS build ships beside them */
    const { PGlite: pglite } = require('@electric-sql/pglite') as { PGlite: typeof PGlite };
    const { pg_trgm } = require('@electric-sql/pglite/contrib/pg_trgm') as { pg_trgm: Extension };
    const ClientPgLite = require('knex-pglite') as typeof knex.Client;
    /* eslint-enable @typescript-eslint/no-require-imports */
    return { PGlite: pglite, pg_trgm, ClientPgLite };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw error;
    throw new Error(
      'DB_HOSTNAME is not set, so the embedded database was chosen, but its packages ' +
        '(@electric-sql/pglite, knex-pglite) are not installed: this install left out optional ' +
        'dependencies, as the production image does. Set DB_HOSTNAME (and the other DB_* settings) ' +
        'to a PostgreSQL server, or install with optional dependencies.',
      { cause: error },
    );
  }
}

/** How long a replica waits for another one's migrations before it gives up. */
const MIGRATION_WAIT_MS = 120_000;

function knexLog(logger: Logger): Knex.Config['log'] {
  return {
    warn: (message: unknown) => {
      logger.warn({ source: 'knex' }, String(message));
    },
    error: (message: unknown) => {
      logger.error({ source: 'knex' }, String(message));
    },
    deprecate: (method: string, alternative: string) => {
      logger.warn({ source: 'knex' }, `${method} is deprecated, use ${alternative}`);
    },
    debug: () => undefined,
  };
}

// Any fixed number works; it only has to be the same in every replica of this service.
const EXCLUSIVE_LOCK_KEY = 7_262_017_450;

/**
 * Holds a PostgreSQL session advisory lock on a connection of its own (outside the pool, so a pool
 * of one cannot deadlock) while `work` runs. Knex's own migration lock lives in a table that knex
 * creates without one, so replicas racing on an empty database can fail on that table or leave it
 * with two rows; this lock keeps them in line first. If the holder dies, its session ends and
 * PostgreSQL frees the lock: nothing is left for an operator to unlock.
 */
async function exclusiveOnPostgres<T>(
  config: ClientConfig,
  work: () => Promise<T>,
  waitMs: number,
  onWait?: () => void,
): Promise<T> {
  const client = new Client(config);
  // A dropped session is reported through the pending query; this only keeps the error from being unhandled.
  client.on('error', () => undefined);
  await client.connect();
  try {
    const deadline = Date.now() + waitMs;
    for (let attempt = 0; ; attempt++) {
      const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [
        EXCLUSIVE_LOCK_KEY,
      ]);
      if (rows[0]?.locked) break;
      if (Date.now() > deadline) throw new Error('timed out waiting for another replica to finish migrating');
      if (attempt === 0) onWait?.();
      await sleep(100 + Math.random() * 200);
    }
    return await work();
  } finally {
    // Ending the session releases the lock.
    await client.end();
  }
}

/** Opens PostgreSQL when DB_HOSTNAME is set, otherwise the embedded PGlite database. */
export async function openDatabase(settings: Settings, logger: Logger): Promise<Database> {
  const { db } = settings;
  if (db.hostname) {
    const connection = {
      host: db.hostname,
      port: db.port,
      user: db.username,
      password: db.password,
      database: db.name,
      ssl: db.ssl ? { rejectUnauthorized: true } : false,
      // Bounded waits everywhere: a slow or absent database answers 503, it never hangs a request.
      statement_timeout: db.statementTimeoutMs,
      connectionTimeoutMillis: 2000,
      application_name: 'social-posts',
    };
    const instance = knex({
      client: 'pg',
      connection,
      pool: { min: 0, max: db.poolMax, idleTimeoutMillis: 30_000 },
      acquireConnectionTimeout: 2500,
      log: knexLog(logger),
    });
    return {
      knex: instance,
      kind: 'postgres',
      exclusive: (work, waitMs, onWait) => exclusiveOnPostgres(connection, work, waitMs, onWait),
      close: () => instance.destroy(),
    };
  }

  const { PGlite: EmbeddedPGlite, pg_trgm, ClientPgLite } = loadEmbedded();
  const inMemory = db.embeddedDir === 'memory://';
  if (!inMemory) mkdirSync(db.embeddedDir, { recursive: true });
  const pglite = new EmbeddedPGlite(db.embeddedDir, { extensions: { pg_trgm } });
  await pglite.waitReady;
  // PGlite has one session, so a session-wide setting covers every query.
  await pglite.exec(`SET statement_timeout = ${String(db.statementTimeoutMs)}`);
  const instance = knex({
    client: ClientPgLite,
    dialect: 'postgres',
    connection: () => ({ pglite }) as unknown as Knex.StaticConnectionConfig,
    log: knexLog(logger),
  });
  return {
    knex: instance,
    kind: 'embedded',
    // PGlite belongs to this process alone: there is no other process to keep out.
    exclusive: (work) => work(),
    close: async () => {
      await instance.destroy();
      if (!pglite.closed) await pglite.close();
    },
  };
}

const migrationSource: Knex.MigrationSource<string> = {
  getMigrations: () => Promise.resolve(Object.keys(migrations).sort()),
  getMigrationName: (name) => name,
  getMigration: (name) => {
    const migration = migrations[name];
    if (!migration) throw new Error(`unknown migration ${name}`);
    return Promise.resolve(migration);
  },
};

const migratorConfig: Knex.MigratorConfig = { migrationSource };

/**
 * Knex's lock taken by a process outside the advisory lock (an older release, a knex CLI): wait
 * and try again; the other's work is then seen as done.
 */
function isLockedByAnother(error: unknown): boolean {
  return /already locked/i.test(errorFields(error).message);
}

/**
 * The code and message of anything thrown. Driver errors come from Node's own realm, where
 * `instanceof Error` can be false (under jest's sandbox, for one), so fields are read directly.
 */
export function errorFields(error: unknown): { name: string; code: string | undefined; message: string } {
  if (typeof error !== 'object' || error === null)
    return { name: '', code: undefined, message: String(error) };
  const { name, code, message } = error as { name?: unknown; code?: unknown; message?: unknown };
  return {
    name: typeof name === 'string' ? name : '',
    code: typeof code === 'string' ? code : undefined,
    message: typeof message === 'string' ? message : '',
  };
}

/**
 * Brings the schema up to date, one replica at a time, under knex's migration lock; returns the
 * names it applied.
 */
export async function migrateToLatest(db: Database, logger: Logger): Promise<string[]> {
  const deadline = Date.now() + MIGRATION_WAIT_MS;
  return db.exclusive(
    async () => {
      for (;;) {
        try {
          const [, applied] = (await db.knex.migrate.latest(migratorConfig)) as [number, string[]];
          if (applied.length > 0) logger.info({ migrations: applied }, 'migrations applied');
          else logger.info('schema up to date');
          return applied;
        } catch (error) {
          if (!isLockedByAnother(error) || Date.now() > deadline) throw error;
          logger.info('the migration lock is taken; waiting');
          await sleep(250 + Math.random() * 500);
        }
      }
    },
    MIGRATION_WAIT_MS,
    () => {
      logger.info('another replica is migrating; waiting');
    },
  );
}

/**
 * The result of `work`, or a rejection with `message` after `ms`: a caller (a probe, a scrape) gets
 * an answer in bounded time even when the database hangs. The work itself is not cancelled.
 */
export async function withTimeout<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => {
      reject(new Error(message));
    }, ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Rolls back the last batch of migrations (operators' `npm run migrate:down`). */
export async function migrateDown(db: Database): Promise<string[]> {
  const [, undone] = (await db.exclusive(
    () => db.knex.migrate.rollback(migratorConfig),
    MIGRATION_WAIT_MS,
  )) as [number, string[]];
  return undone;
}

/** Frees a lock left behind by a process that died mid-migration. */
export async function unlockMigrations(db: Database): Promise<void> {
  await db.knex.migrate.forceFreeMigrationsLock(migratorConfig);
}

const UNAVAILABLE_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * True for errors that mean the database is away or overloaded rather than that the query was
 * wrong: these answer 503 so clients and probes can tell "try again" from a bug.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  const { name, code, message } = errorFields(error);
  if (name === 'KnexTimeoutError') return true;
  if (code !== undefined) {
    if (UNAVAILABLE_ERRNO.has(code)) return true;
    // SQLSTATE classes: 08 connection exception, 53 insufficient resources, 57 operator
    // intervention (57014 is a statement time-out, 57P01 an administrator shutdown).
    if (/^(08|53|57)[0-9A-Z]{3}$/.test(code)) return true;
  }
  return /Connection terminated|connection timeout|Client has encountered a connection error|PGlite is closed|Unable to acquire a connection/i.test(
    message,
  );
}
