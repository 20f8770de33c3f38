import { setTimeout as sleep } from 'node:timers/promises';
import type { Knex } from 'knex';
import { Client, type ClientConfig } from 'pg';
import { migrations } from '../../migrations';
import type { Database } from './database';
import { errorFields } from './database-errors';
import type { Logger } from './logger';

/**
 * Migrations: the source (migrations/index.ts), the advisory lock that keeps replicas in line,
 * and latest/down/unlock. `migrate.ts` is their command line; `main.ts` runs latest at start-up.
 */

/** How long a replica waits for another one's migrations before it gives up. */
const MIGRATION_WAIT_MS = 120_000;

// Any fixed number works; it only has to be the same in every replica of this service.
const EXCLUSIVE_LOCK_KEY = 7_262_017_450;

/**
 * Holds a PostgreSQL session advisory lock on a connection of its own (outside the pool, so a pool
 * of one cannot deadlock) while `work` runs. Knex's own migration lock lives in a table that knex
 * creates without one, so replicas racing on an empty database can fail on that table or leave it
 * with two rows; this lock keeps them in line first. If the holder dies, its session ends and
 * PostgreSQL frees the lock: nothing is left for an operator to unlock.
 */
export async function exclusiveOnPostgres<T>(
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

const migrationSource: Knex.MigrationSource<string> = {
  getMigrations: () => Promise.resolve(knownMigrations()),
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
