import { setTimeout as sleep } from 'node:timers/promises';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { migrations } from '../../../migrations';
import type { Database, MigrationConnection } from './connection';
import { errorFields, errorWithHint, isDatabaseUnavailable } from './errors';
import { withAdvisoryLock } from './lock';

/**
 * Migrations: the source (migrations/index.ts), one replica at a time (lock.ts), and
 * latest/down/unlock. `migrate.ts` is their command line; `main.ts` runs latest at start-up.
 * They run on a connection of their own (`Database.forMigrations`) with their own statement
 * time-out, through the same host as requests: a pooler in transaction mode is enough.
 */

/** How long to wait for knex's own lock taken by a process outside ours (below). */
const KNEX_LOCK_WAIT_MS = 120_000;

const migrationSource: Knex.MigrationSource<string> = {
  getMigrations: () => Promise.resolve(knownMigrations()),
  getMigrationName: (name) => name,
  getMigration: (name) => {
    const migration = migrations[name];
    if (!migration) throw new Error(`unknown migration ${name}`);
    return Promise.resolve(migration);
  },
};

const migratorConfig: Knex.MigratorConfig = {
  migrationSource,
  // A release rolled back after a newer one migrated still starts: migrations only expand the
  // schema (docs/migrations.md), so the ones it does not know are the newer release's, not lost.
  disableMigrationsListValidation: true,
};

/** The first pause before a migration that could not take its lock is tried again, doubled up to the cap. */
const LOCK_RETRY_MS = 500;
const LOCK_RETRY_CAP_MS = 5000;

/** PostgreSQL's lock_not_available: a statement waited lock_timeout for its lock. */
const isLockTimeout = (error: unknown): boolean => errorFields(error).code === '55P03';

/**
 * Knex's lock taken by a process outside the advisory lock (an older release, a knex CLI): wait
 * and try again; the other's work is then seen as done.
 */
function isLockedByAnother(error: unknown): boolean {
  return /already locked/i.test(errorFields(error).message);
}

/**
 * Runs `work` on the migrations' connection inside the lock's transaction, whose statements may
 * each run for the migration time-out (on the server too: `SET LOCAL` lasts as long as the
 * transaction). A replica waits as long for another one's migrations.
 */
async function underLock<T>(
  connection: MigrationConnection,
  logger: Logger,
  work: (trx: Knex.Transaction) => Promise<T>,
): Promise<T> {
  return withAdvisoryLock(
    connection.knex,
    async (trx) => {
      await trx.raw(`SET LOCAL statement_timeout = ${String(connection.timeoutMs)}`);
      // Traffic on a table queues behind a lock this transaction waits for: bound that wait.
      await trx.raw(`SET LOCAL lock_timeout = ${String(connection.lockTimeoutMs)}`);
      return work(trx);
    },
    connection.timeoutMs,
    () => {
      logger.info('another replica is migrating; waiting');
    },
  );
}

/** Runs `use` with the migrations' connection, closed after it. */
async function withMigrationConnection<T>(
  db: Database,
  use: (connection: MigrationConnection) => Promise<T>,
): Promise<T> {
  const connection = db.forMigrations();
  try {
    return await use(connection);
  } finally {
    await connection.close();
  }
}

/**
 * Brings the schema up to date, all pending migrations in one transaction (a failure leaves the
 * schema as it was); returns the names it applied. A statement that waits past lock_timeout for a
 * table rolls the whole transaction back, releasing the locks it took, and it is tried again after
 * a growing pause (with jitter, so replicas do not retry in step) until DB_MIGRATION_TIMEOUT_MS.
 */
export function migrateToLatest(db: Database, logger: Logger): Promise<string[]> {
  return withMigrationConnection(db, (connection) => latest(connection, logger));
}

async function latest(connection: MigrationConnection, logger: Logger): Promise<string[]> {
  const started = Date.now();
  let lockRetryMs = LOCK_RETRY_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await underLock(connection, logger, async (trx) => {
        const [, applied] = (await trx.migrate.latest(migratorConfig)) as [number, string[]];
        if (applied.length > 0) logger.info({ migrations: applied, attempt }, 'migrations applied');
        else logger.info('schema up to date');
        return applied;
      });
    } catch (error) {
      if (isLockTimeout(error) && Date.now() - started < connection.timeoutMs) {
        logger.warn(
          { attempt, retryInMs: lockRetryMs },
          'a migration waited lock_timeout for a table in use; rolled back, trying again',
        );
        await sleep(lockRetryMs * (0.5 + Math.random()));
        lockRetryMs = Math.min(lockRetryMs * 2, LOCK_RETRY_CAP_MS);
        continue;
      }
      if (!isLockedByAnother(error) || Date.now() - started > KNEX_LOCK_WAIT_MS) throw error;
      logger.info('the migration lock is taken; waiting');
      await sleep(250 + Math.random() * 500);
    }
  }
}

/**
 * migrateToLatest, retried while the database cannot be reached (refused, unresolvable, a pooler or
 * TLS refusing the connection) for up to `waitMs`: a pod that starts before its database (a new
 * CloudNativePG Cluster, a failover, a pooler restart) comes up once it is there instead of exiting
 * into the kubelet's growing restart back-off. Anything else, a statement time-out included, fails at once.
 */
export async function migrateWhenReachable(db: Database, logger: Logger, waitMs: number): Promise<string[]> {
  const deadline = Date.now() + waitMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await migrateToLatest(db, logger);
    } catch (error) {
      const retry =
        isDatabaseUnavailable(error) && errorFields(error).code !== '57014' && Date.now() < deadline;
      if (!retry) throw error;
      logger.warn(
        { ...errorWithHint(error), attempt },
        'the database is not reachable yet; retrying the migrations',
      );
      await sleep(Math.min(1000 * attempt, 5000, Math.max(0, deadline - Date.now())));
    }
  }
}

/** Rolls back the last batch of migrations (operators' `npm run migrate:down`). */
export async function migrateDown(db: Database, logger: Logger): Promise<string[]> {
  const [, undone] = (await withMigrationConnection(db, (connection) =>
    underLock(connection, logger, (trx) => trx.migrate.rollback(migratorConfig)),
  )) as [number, string[]];
  return undone;
}

/** Frees a lock left behind by a process that died mid-migration. */
export async function unlockMigrations(db: Database): Promise<void> {
  await db.knex.migrate.forceFreeMigrationsLock(migratorConfig);
}

/** The names of the migrations this build ships, in order. */
export const knownMigrations = (): string[] => Object.keys(migrations).sort();

export interface MigrationState {
  applied: number;
  pending: number;
  lastAppliedSeconds: number;
}

/** What the database has applied of the migrations this build knows. */
export async function migrationState(db: Database): Promise<MigrationState> {
  const rows = await db
    .knex<{ name: string; migration_time: Date | string }>('knex_migrations')
    .select('name', 'migration_time');
  const applied = new Set(rows.map((row) => row.name));
  const last = Math.max(0, ...rows.map((row) => new Date(row.migration_time).getTime()));
  return {
    applied: applied.size,
    pending: knownMigrations().filter((name) => !applied.has(name)).length,
    lastAppliedSeconds: last / 1000,
  };
}
