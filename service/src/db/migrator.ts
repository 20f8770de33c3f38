import { setTimeout as sleep } from 'node:timers/promises';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { migrations } from '../../../migrations';
import type { Database, MigrationConnection } from './connection';
import type { DeadlineConnection } from './deadline';
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
 * Brings the schema up to date; returns the names it applied. Pending migrations run together in
 * one transaction (a failure leaves the schema as it was), except one whose module exports
 * `config = { transaction: false }` (knex's convention): the ones before it commit first, then it
 * runs alone, outside any transaction, while the lock is held (runOutside). A statement that waits
 * past lock_timeout for a table rolls back what the step had done, releasing the locks it took,
 * and the step is tried again after a growing pause (with jitter, so replicas do not retry in
 * step) until DB_MIGRATION_TIMEOUT_MS.
 */
export function migrateToLatest(db: Database, logger: Logger): Promise<string[]> {
  return withMigrationConnection(db, (connection) => latest(db, connection, logger));
}

/** knex's per-migration `config.transaction`: false runs the migration outside the transaction. */
const runsOutsideTransaction = (name: string): boolean => migrations[name]?.config?.transaction === false;

/** A source of only `names` (of the known migrations): knex then runs no other. */
export const sourceOf = (names: string[]): Knex.MigratorConfig => ({
  ...migratorConfig,
  migrationSource: { ...migrationSource, getMigrations: () => Promise.resolve(names) },
});

/** `config` with a log line as each migration starts and ends: a first start is not silent. */
function withProgress(config: Knex.MigratorConfig, logger: Logger): Knex.MigratorConfig {
  const source = config.migrationSource as Knex.MigrationSource<string>;
  const withLines: Knex.MigrationSource<string> = {
    ...source,
    getMigration: async (name: string) => {
      const migration = await source.getMigration(name);
      return {
        ...migration,
        up: async (k: Knex) => {
          const started = Date.now();
          logger.info({ migration: name }, `migration ${name} running`);
          await migration.up(k);
          logger.info({ migration: name, durationMs: Date.now() - started }, `migration ${name} done`);
        },
      };
    },
  };
  return { ...config, migrationSource: withLines };
}

interface Step {
  applied: string[];
  /** Migrations remain after this step. */
  more: boolean;
  /** On the embedded database: this one runs outside a transaction once the lock's has ended. */
  afterLock?: string;
}

/**
 * One step, under the lock: the pending migrations up to the first that runs outside a transaction,
 * in this transaction as knex runs them; or, when that one comes first, it alone.
 */
async function nextStep(db: Database, trx: Knex.Transaction, logger: Logger): Promise<Step> {
  const [, pending] = (await trx.migrate.list(migratorConfig)) as [unknown, string[]];
  const cut = pending.findIndex(runsOutsideTransaction);
  if (cut !== 0) {
    const later = new Set(cut === -1 ? [] : pending.slice(cut));
    const config = cut === -1 ? migratorConfig : sourceOf(knownMigrations().filter((n) => !later.has(n)));
    const count = cut === -1 ? pending.length : cut;
    if (count > 0) logger.info({ pending: pending.slice(0, count) }, `applying ${String(count)} migrations`);
    const [, applied] = (await trx.migrate.latest(withProgress(config, logger))) as [number, string[]];
    return { applied, more: cut > 0 };
  }
  const name = pending[0] as string;
  // PGlite has one session, which this transaction holds; and no other process shares its files.
  if (db.kind === 'embedded') return { applied: [], more: true, afterLock: name };
  // A second connection: this one keeps the lock and touches no table the migration uses, so a
  // concurrent index build has nothing of ours to wait for.
  await onSecondConnection(db, logger, (outside) => runOutside(outside, name, 'up', logger));
  await recordApplied(trx, name);
  return { applied: [name], more: pending.length > 1 };
}

async function onSecondConnection(
  db: Database,
  logger: Logger,
  use: (c: MigrationConnection) => Promise<void>,
): Promise<void> {
  let connection = db.forMigrations(true);
  const reason = await reachesServerItself(connection.knex).then(
    (own) => (own ? undefined : 'it reaches a pooler, which keeps no setting to one client'),
    // PgBouncer refuses them ("unsupported startup parameter"), other poolers in words of their own;
    // a fault of the database itself fails the plain connection below as well.
    (error: unknown) => errorFields(error).message || 'the connection with time-outs failed',
  );
  if (reason) {
    await connection.close();
    logger.info({ reason }, 'the migration runs without session time-outs, on a plain connection');
    connection = db.forMigrations();
  }
  try {
    await use(connection);
  } finally {
    await connection.close();
  }
}

/**
 * Whether `k`'s connection is a server session of its own: the backend PostgreSQL named when it
 * opened (its cancel key) is the one running the statement. A pooler names one of its own, and may
 * accept the time-outs in the startup packet and drop them or set them on a shared session.
 */
async function reachesServerItself(k: Knex): Promise<boolean> {
  // knex's own pool, to read what pg's client was told when it connected.
  const pool = k.client as {
    acquireConnection(): Promise<DeadlineConnection>;
    releaseConnection(client: DeadlineConnection): Promise<unknown>;
  };
  const client = await pool.acquireConnection();
  try {
    // Through knex on that very connection, so the statement has the pool's deadline.
    const { rows } = await k
      .raw<{ rows: { pid: number }[] }>('SELECT pg_backend_pid() AS pid')
      .connection(client);
    return rows[0]?.pid === client.processID;
  } finally {
    await pool.releaseConnection(client);
  }
}

/**
 * Runs a migration's `up` or `down` on `connection` outside any transaction. On PostgreSQL no
 * session `SET` is sent: behind a pooler in transaction mode it would stay on whichever server
 * connection took it, in other clients' sessions, and ending that session to be rid of it broke
 * the request it was serving. Direct to PostgreSQL the time-outs came with the connection
 * (onSecondConnection); behind a pooler the connection's own deadline bounds each statement, and a
 * concurrent index build's lock holds up no request. On PGlite, the one session the app goes on
 * using, the migration's time-outs are set and then set back.
 */
async function runOutside(
  connection: MigrationConnection,
  name: string,
  direction: 'up' | 'down',
  logger: Logger,
): Promise<void> {
  const run = migrations[name]?.[direction];
  if (!run) throw new Error(`migration ${name} has no ${direction}`);
  const k = connection.knex;
  const started = Date.now();
  if ('pglite' in k.client) await withSessionTimeouts(connection, () => run(k), logger);
  else await run(k);
  logger.info(
    { migration: name, direction, durationMs: Date.now() - started },
    'migration ran outside a transaction',
  );
}

/** `use` under the migration's lock_timeout and statement time-out on PGlite's one session, then both set back. */
async function withSessionTimeouts(
  connection: MigrationConnection,
  use: () => PromiseLike<unknown>,
  logger: Logger,
): Promise<void> {
  const k = connection.knex;
  const { rows } = await k.raw<{ rows: { lock: string; statement: string }[] }>(
    "SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement",
  );
  const [before] = rows;
  // PGlite takes one statement a message.
  await k.raw(`SET lock_timeout = ${String(connection.lockTimeoutMs)}`);
  await k.raw(`SET statement_timeout = ${String(connection.timeoutMs)}`);
  try {
    await use();
  } finally {
    if (before)
      await k
        .raw("SELECT set_config('lock_timeout', ?, false), set_config('statement_timeout', ?, false)", [
          before.lock,
          before.statement,
        ])
        .catch((error: unknown) => {
          logger.warn({ err: error }, "a migration's time-outs could not be set back");
        });
  }
}

/** knex's record of an applied migration, in a batch of its own (`down` undoes it alone). */
async function recordApplied(k: Knex, name: string): Promise<void> {
  const [last] = await k('knex_migrations').max<{ batch: number | null }[]>('batch as batch');
  await k('knex_migrations').insert({ name, batch: (last?.batch ?? 0) + 1, migration_time: new Date() });
}

async function latest(db: Database, connection: MigrationConnection, logger: Logger): Promise<string[]> {
  const applied: string[] = [];
  let started = Date.now();
  let lockRetryMs = LOCK_RETRY_MS;
  let attempt = 1;
  for (;;) {
    try {
      const step = await underLock(connection, logger, (trx) => nextStep(db, trx, logger));
      if (step.afterLock) {
        await runOutside(connection, step.afterLock, 'up', logger);
        await recordApplied(connection.knex, step.afterLock);
        step.applied.push(step.afterLock);
      }
      applied.push(...step.applied);
      if (step.more) {
        // Each step has the whole budget for its own lock retries.
        started = Date.now();
        lockRetryMs = LOCK_RETRY_MS;
        continue;
      }
      if (applied.length > 0) logger.info({ migrations: applied, attempt }, 'migrations applied');
      else logger.info('schema up to date');
      return applied;
    } catch (error) {
      attempt++;
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
      const leftSeconds = Math.ceil((deadline - Date.now()) / 1000);
      // The stack says nothing new on each retry; the message and hint say what is wrong.
      const { err, hint } = errorWithHint(error);
      logger.warn(
        logger.isLevelEnabled('debug')
          ? { err, hint, attempt }
          : { error: errorFields(err).message, hint, attempt },
        `the database is not reachable yet; retrying for ${String(leftSeconds)} s more (DB_STARTUP_WAIT_SECONDS)`,
      );
      await sleep(Math.min(1000 * attempt, 5000, Math.max(0, deadline - Date.now())));
    }
  }
}

/** The migrations the database records as applied, in order (none on a database never migrated). */
export async function appliedMigrations(k: Knex): Promise<string[]> {
  if (!(await k.schema.hasTable('knex_migrations'))) return [];
  const rows = await k<{ name: string }>('knex_migrations').select('name');
  return rows.map((row) => row.name).sort();
}

/**
 * What `migrateDownTo(keep)` would undo, newest first, or why it must not start: `keep` unknown to
 * this build or not applied, or a migration after it that only a newer release can undo.
 */
function downPlan(applied: readonly string[], keep: string | null): string[] {
  const known = knownMigrations();
  if (keep !== null && !known.includes(keep))
    throw new Error(
      `unknown migration "${keep}": this build knows ${known[0] ?? 'none'} to ${known.at(-1) ?? 'none'} (migrate status lists them)`,
    );
  if (keep !== null && !applied.includes(keep))
    throw new Error(`${keep} is not applied: there is nothing after it to undo`);
  const undo = applied.filter((name) => keep === null || name > keep).reverse();
  const newer = undo.filter((name) => !known.includes(name));
  if (newer.length > 0)
    throw new Error(
      `${newer.join(', ')} ${newer.length > 1 ? 'were' : 'was'} applied by a newer release, which this build cannot undo: run that release's migrate down --to ${keep ?? '(none)'} first`,
    );
  return undo;
}

/**
 * Undoes, newest first, every applied migration after `keep` (operators' `migrate down --to`): what an
 * earlier release does not know, before rolling back to it; `null` undoes them all. Each is a step of
 * its own under the lock, and one that ran outside a transaction is undone outside one, so a failure
 * leaves the newer ones undone and the rest applied, and running it again goes on from there.
 */
export async function migrateDownTo(db: Database, logger: Logger, keep: string | null): Promise<string[]> {
  return withMigrationConnection(db, async (connection) => {
    const undone: string[] = [];
    for (const name of downPlan(await appliedMigrations(connection.knex), keep)) {
      const afterLock = await underLock(connection, logger, async (trx) => {
        if (!(await appliedMigrations(trx)).includes(name)) return undefined; // another process undid it
        if (!runsOutsideTransaction(name)) {
          await trx.migrate.down({ ...migratorConfig, name });
          return undefined;
        }
        if (db.kind === 'embedded') return name;
        await onSecondConnection(db, logger, (other) => runOutside(other, name, 'down', logger));
        await trx('knex_migrations').where({ name }).delete();
        return undefined;
      });
      if (afterLock) {
        await runOutside(connection, afterLock, 'down', logger);
        await connection.knex('knex_migrations').where({ name: afterLock }).delete();
      }
      logger.info({ migration: name }, `migration ${name} undone`);
      undone.push(name);
    }
    return undone;
  });
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
