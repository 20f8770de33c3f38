import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import knex, { type Knex } from 'knex';
import type { Logger } from 'pino';
import type { Settings } from '../settings';
import { tracedPoolWait, tracedQuery, tracedStatement } from '../tracing';
import { RequestBudgetError, withinBudget, type Bound } from './budget';
import { CANCEL_GRACE_MS, decidesAChange, withDeadline, type DeadlineConnection } from './deadline';
import { openPGlite } from './embedded';
import { retryingRaces } from './races';
import { readRouter, type ReadRouter } from './standbys';
import type { Statement } from './statements';

/** What the database settings (settings.ts, DB_*) hold. */
export type DatabaseConfig = Settings['db'];

/** What migrations run on: a connection of their own with their own statement time-out. */
export interface MigrationConnection {
  knex: Knex;
  /** The longest one migration statement may run, on the server and on the client. */
  timeoutMs: number;
  /** The longest one migration statement may wait for a lock (PostgreSQL's lock_timeout). */
  lockTimeoutMs: number;
  close(): Promise<void>;
}

export interface Database {
  knex: Knex;
  kind: 'postgres' | 'embedded';
  /** Runs a statement (see statements.ts) on a connection of the pool; its rows. */
  run<Row, P extends object>(statement: Statement<P>, params: P): Promise<Row[]>;
  /** Where reads that may go to a standby run (standbys.ts): `reads.run`; the primary without DB_READ_HOSTNAME. */
  reads: ReadRouter;
  /**
   * Opens the migrations' connection (on the embedded database, its one session). With
   * `sessionTimeouts` the migration's lock_timeout and statement time-out go in its startup packet,
   * so they are its session's own and end with it; PgBouncer refuses that, and PGlite ignores it.
   */
  forMigrations(sessionTimeouts?: boolean): MigrationConnection;
  /**
   * Whether the database is a standby (read-only), for readiness; rejects when it does not answer.
   * PostgreSQL: on one connection of its own, outside the request pool, so a pool busy with
   * requests does not make a healthy replica look unready. Embedded: the one session.
   */
  isStandby(): Promise<boolean>;
  close(): Promise<void>;
}

/** The driver connection knex's pool lends: pg's Client, or the PGlite instance itself. */
/** A pooled connection as the statements see it: pg's Client, or knex-pglite's PGlite session. */
type DriverConnection = object;

interface Rows {
  rows: unknown[];
}

/** How a statement reaches a connection: its name (used when prepared), text and values. */
type Send = (connection: DriverConnection, name: string, text: string, values: unknown[]) => Promise<Rows>;

/** The part of pg's Client a statement uses: its callback form. */
interface PgClient {
  query(
    query: { name?: string; text: string; values: unknown[] },
    callback: (error: Error | null, result: Rows) => void,
  ): void;
}

/**
 * PostgreSQL through pg's callback form: with its promise form each result's rows outlived the
 * young-generation collections that came while they were still referenced, were promoted to the old
 * generation, and made every scavenge several times slower (docs/benchmarks.md, "Cuts the code keeps").
 */
const postgresSend =
  (named: boolean): Send =>
  (connection, name, text, values) =>
    new Promise((resolve, reject) => {
      (connection as PgClient).query(named ? { name, text, values } : { text, values }, (error, result) => {
        if (error) reject(error);
        else resolve(result);
      });
    });

/** PGlite's session (knex-pglite) answers a statement's text and values with a promise. */
const pgliteSend: Send = (connection, _name, text, values) =>
  (connection as { query(text: string, values: unknown[]): Promise<Rows> }).query(text, values);

/** Runs `send`, statement `sql` on `connection`, under the deadline the database kind gives it. */
type Deadline = <T>(connection: DriverConnection, send: () => Promise<T>, sql: string) => Promise<T>;

/** The longest anything waits for a pooled connection; within a request, less when its budget says so. */
const ACQUIRE_TIMEOUT_MS = 2500;

/** The part of tarn's pool (knex's) that a bounded acquire uses. */
interface AcquiringPool {
  acquire(): { promise: Promise<unknown>; abort(): void };
}

/** What knex hands its client's query: a transaction's BEGIN, COMMIT and ROLLBACK as bare strings. */
type KnexQuery = string | { sql?: unknown };

/** The SQL of what knex sends ('' for a query object without text). */
const sqlOf = (obj: KnexQuery): string => {
  const sql = typeof obj === 'string' ? obj : obj.sql;
  return typeof sql === 'string' ? sql : '';
};

/**
 * A knex client whose wait for a pooled connection is bounded by what is left of the request's
 * database budget (budget.ts), on every path: knex's query builders and transactions and
 * statementRunner all call acquireConnection. tarn fixes one acquire time-out per pool, so a
 * shorter wait aborts the pending acquire: tarn then takes it out of its queue, and a connection
 * it was already checking for this acquire goes back to the pool for the next one. Within a sampled
 * request the wait is a span, and so is each statement knex sends itself (a transaction's too: its
 * client inherits this query); statementRunner's statements have their own.
 */
function requestClient(Base: typeof knex.Client): typeof knex.Client {
  const Client = Base as unknown as new (config: Knex.Config) => Knex.Client;
  class RequestClient extends Client {
    override acquireConnection(): Promise<unknown> {
      const pool = this.pool as AcquiringPool | undefined;
      return tracedPoolWait(() =>
        withinBudget(ACQUIRE_TIMEOUT_MS, 'no pooled connection asked for', (bound) =>
          bound.budgetMs === undefined || !pool
            ? (super.acquireConnection() as Promise<unknown>)
            : boundedAcquire(pool, bound),
        ),
      );
    }

    override query(connection: unknown, obj: KnexQuery): Promise<unknown> {
      return tracedQuery(sqlOf(obj), () => super.query(connection, obj) as Promise<unknown>);
    }
  }
  return RequestClient as unknown as typeof knex.Client;
}

async function boundedAcquire(pool: AcquiringPool, bound: Bound): Promise<unknown> {
  const pending = pool.acquire();
  // An object, as the timer sets it where the compiler's flow analysis does not look.
  const state = { timedOut: false };
  const timer = setTimeout(() => {
    state.timedOut = true;
    pending.abort();
  }, bound.ms);
  try {
    return await pending.promise;
  } catch (error) {
    if (!state.timedOut) throw error;
    throw new RequestBudgetError(
      `no pooled connection came free within ${String(bound.ms)} ms, what was left of the request's database budget of ${String(bound.budgetMs)} ms (DB_STATEMENT_TIMEOUT_MS)`,
      error,
    );
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Statements go straight to a connection from knex's pool, past knex's query runner: the pool's
 * limits and acquire time-out (bounded by the request's budget) still hold, and a knex transaction
 * holding PGlite's one connection still keeps them out until it ends. On PostgreSQL `send` makes
 * it a named prepared statement when DB_PREPARED_STATEMENTS is on (parsed and planned once per
 * connection; pg remembers which names each connection has prepared, and PgBouncer from 1.21
 * re-prepares them on whichever server connection it picks); otherwise the text goes each time,
 * as an unnamed statement any pooler passes through. A statement that lost a race to another
 * writer is sent again (races.ts).
 */
function statementRunner(instance: Knex, send: Send, deadline: Deadline): Database['run'] {
  const client = instance.client as {
    acquireConnection(): Promise<DriverConnection>;
    releaseConnection(connection: DriverConnection): Promise<unknown>;
  };
  return async <Row, P extends object>(statement: Statement<P>, params: P) => {
    const { text, values } = statement.compile(instance);
    return retryingRaces(async () => {
      const connection = await client.acquireConnection();
      try {
        const result = await tracedStatement(statement.name, () =>
          deadline(connection, () => send(connection, statement.name, text, values(params)), text),
        );
        return result.rows as Row[];
      } finally {
        void client.releaseConnection(connection);
      }
    });
  };
}

/**
 * Sends `sql` under a deadline of `timeoutMs` or, within a request, what is left of its budget
 * when shorter. A statement the request has no time left for is never sent.
 */
function budgetedStatement<T>(
  connection: DeadlineConnection,
  timeoutMs: number,
  sql: string,
  send: () => Promise<T>,
  graceMs = CANCEL_GRACE_MS,
): Promise<T> {
  return withinBudget(timeoutMs, 'statement not sent', (bound) => {
    const decides = decidesAChange(sql, connection);
    return withDeadline(connection, send(), bound, { graceMs, decides });
  });
}

/** A statement that ends a transaction: COMMIT, ROLLBACK (or ROLLBACK TO SAVEPOINT), END, ABORT. */
const ENDS_TRANSACTION = /^\s*(commit|rollback|end|abort)\b/i;

/**
 * knex's PostgreSQL client with every statement it runs (queries, transactions' BEGIN and COMMIT,
 * migrations, its version check) under a client-side deadline (deadline.ts), and its waits for a
 * connection bounded by the request's budget.
 */
function postgresClient(timeoutMs: number, graceMs: number): typeof knex.Client {
  /* eslint-disable-next-line @typescript-eslint/no-require-imports -- knex exports no dialect
     class; its typings leave out checkVersion, the query sent on a pool's first connection */
  const KnexPostgres = require('knex/lib/dialects/postgres') as new (config: Knex.Config) => Knex.Client & {
    checkVersion(connection: DeadlineConnection): Promise<string>;
  };
  class PostgresWithDeadlines extends KnexPostgres {
    override query(connection: DeadlineConnection, obj: KnexQuery): Promise<unknown> {
      const sql = sqlOf(obj);
      // An end refused for want of budget would leave its connection inside the transaction, for
      // the next request to run in: it is always sent, under the statement time-out alone.
      if (ENDS_TRANSACTION.test(sql)) {
        const options = { graceMs, decides: decidesAChange(sql, connection) };
        return withDeadline(
          connection,
          super.query(connection, obj) as Promise<unknown>,
          { ms: timeoutMs },
          options,
        );
      }
      return budgetedStatement(
        connection,
        timeoutMs,
        sql,
        () => super.query(connection, obj) as Promise<unknown>,
        graceMs,
      );
    }

    // A connection handed back inside a transaction (its end failed or never came) is closed,
    // which rolls it back, instead of lending the next request its locks and its writes.
    override releaseConnection(connection: DeadlineConnection): Promise<unknown> {
      const status = connection.getTransactionStatus?.();
      if (status === 'T' || status === 'E')
        connection.__knex__disposed ??= new Error('returned to the pool inside a transaction');
      return super.releaseConnection(connection) as Promise<unknown>;
    }

    // Sent while a connection is made for the pool, not for one request: no budget applies.
    override checkVersion(connection: DeadlineConnection): Promise<string> {
      return withDeadline(connection, super.checkVersion(connection), { ms: timeoutMs }, { graceMs });
    }
  }
  return requestClient(PostgresWithDeadlines as unknown as typeof knex.Client);
}

function knexLog(logger: Logger): Knex.Config['log'] {
  return {
    warn: (message: unknown) => {
      const text = String(message);
      // A failed connect also fails the acquire that asked for it, whose caller logs it in its own
      // words (a start-up's one line, a request's 503): here only for whoever asked for detail.
      if (text.startsWith('Acquire connection error')) logger.debug({ source: 'knex' }, text);
      else logger.warn({ source: 'knex' }, text);
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

/** How often, at most, the CA file is read again to see whether it changed. */
const CA_CHECK_INTERVAL_MS = 2000;

/**
 * Connection settings with the CA file's content, for knex's provider: CloudNativePG renews its CA
 * certificate before the 90 days run out and the mounted file follows, so a pod that has run longer
 * must trust the renewed one. knex asks expirationChecker before lending a connection; when the
 * file changed, new connections get the new content (and knex replaces the pooled ones). If the
 * file cannot be read, the last good content serves, with a warning.
 */
function withCaFile<T extends object>(settings: T, file: string, logger: Logger): () => T & object {
  // Checked readable at start-up (settings.ts); afterwards read only to see whether it changed.
  let pem = readFileSync(file, 'utf8');
  let checkedAt = Date.now();
  const changed = (): boolean => {
    if (Date.now() - checkedAt < CA_CHECK_INTERVAL_MS) return false;
    checkedAt = Date.now();
    let now: string;
    try {
      now = readFileSync(file, 'utf8');
    } catch (error) {
      logger.warn({ err: error, file }, 'DB_SSL_CA_FILE unreadable; using its last content');
      return false;
    }
    if (now === pem) return false;
    pem = now;
    return true;
  };
  return () => ({ ...settings, ssl: { rejectUnauthorized: true, ca: pem }, expirationChecker: changed });
}

/**
 * A pool of PostgreSQL connections whose statements each have `timeoutMs`; a statement past it
 * is cancelled and its connection destroyed `graceMs` later if it has not answered.
 */
function postgresPool(
  db: DatabaseConfig,
  logger: Logger,
  poolMax: number,
  timeoutMs: number,
  graceMs = CANCEL_GRACE_MS,
  options?: string,
): Knex {
  // Only what every pooler passes in the startup packet: no statement_timeout, no options, unless asked.
  const connection = {
    ...(options && { options }),
    host: db.hostname,
    port: db.port,
    user: db.username,
    password: db.password,
    database: db.name,
    // Node checks the chain and that the certificate names the host (pg passes it as servername).
    ssl: db.ssl ? { rejectUnauthorized: true } : false,
    connectionTimeoutMillis: 2000,
    // Idle connections to a server that has gone are found and closed by the kernel.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: 'social-posts',
  };
  return knex({
    client: postgresClient(timeoutMs, graceMs),
    connection: db.ssl && db.sslCaFile ? withCaFile(connection, db.sslCaFile, logger) : connection,
    pool: { min: 0, max: poolMax, idleTimeoutMillis: 30_000 },
    acquireConnectionTimeout: ACQUIRE_TIMEOUT_MS,
    log: knexLog(logger),
  });
}

async function standby(on: Knex): Promise<boolean> {
  const { rows } = await on.raw<{ rows: { standby: boolean }[] }>('SELECT pg_is_in_recovery() AS standby');
  return rows[0]?.standby === true;
}

/** Opens PostgreSQL when DB_HOSTNAME is set, otherwise the embedded PGlite database. */
export async function openDatabase(settings: { db: DatabaseConfig }, logger: Logger): Promise<Database> {
  const { db } = settings;
  return db.hostname ? openPostgres(db, logger) : openEmbedded(db, logger);
}

/** The primary's pool, one per standby endpoint, and the probes' own connection. */
function openPostgres(db: DatabaseConfig, logger: Logger): Database {
  const instance = postgresPool(db, logger, db.poolMax, db.statementTimeoutMs);
  // The readiness probe's and, with standbys, the reading of the primary's WAL position: requests
  // holding every pooled connection must stop neither. While the migrations' connection is open the
  // request pool is idle, so a process holds at most poolMax + 1 connections.
  // Half the probe's time per try, with no grace: a connection that went silent (its node lost
  // without a reset) is dropped at once and the second try opens a new one, in time to answer.
  const probes = postgresPool(db, logger, 1, DATABASE_CHECK_TIMEOUT_MS / 2, 0);
  const runner = (pool: Knex, graceMs = CANCEL_GRACE_MS) =>
    statementRunner(pool, postgresSend(db.preparedStatements), (connection, send, sql) =>
      budgetedStatement(
        connection as unknown as DeadlineConnection,
        db.statementTimeoutMs,
        sql,
        send,
        graceMs,
      ),
    );
  const run = runner(instance);
  const reads = readRouter({
    primary: run,
    positionKnex: probes,
    maxLagMs: db.readMaxLagMs,
    logger,
    // Each standby endpoint a pool of its own, as the primary's but for its host. A read past its
    // share is dropped with its connection at once, as the probes' are: waiting out a cancel's grace
    // on standbys that went silent would spend the budget the primary's read needs after them.
    standbys: db.readHosts.map(({ host, port }) => {
      const pool = postgresPool(
        { ...db, hostname: host, port },
        logger,
        db.readPoolMax,
        db.statementTimeoutMs,
        0,
      );
      return { name: `${host}:${String(port)}`, knex: pool, run: runner(pool, 0) };
    }),
  });
  return {
    knex: instance,
    isStandby: async () => {
      try {
        return await standby(probes);
      } catch {
        return standby(probes);
      }
    },
    kind: 'postgres',
    run,
    reads,
    forMigrations: (sessionTimeouts = false) => {
      // One connection, opened for the migrations and closed after them.
      const options = sessionTimeouts
        ? `-c lock_timeout=${String(db.migrationLockTimeoutMs)} -c statement_timeout=${String(db.migrationTimeoutMs)}`
        : undefined;
      const migrations = postgresPool(db, logger, 1, db.migrationTimeoutMs, CANCEL_GRACE_MS, options);
      return {
        knex: migrations,
        timeoutMs: db.migrationTimeoutMs,
        lockTimeoutMs: db.migrationLockTimeoutMs,
        close: () => migrations.destroy(),
      };
    },
    close: async () => {
      await Promise.all([reads.close(), instance.destroy(), probes.destroy()]);
    },
  };
}

/** PGlite in this process, in `embeddedDir` (created on the first start) or in memory. */
async function openEmbedded(db: DatabaseConfig, logger: Logger): Promise<Database> {
  // Creating one runs PGlite's initdb, the longest step of a first start: say so before it.
  const exists = db.embeddedDir !== 'memory://' && existsSync(join(db.embeddedDir, 'PG_VERSION'));
  logger.info(
    { dir: db.embeddedDir },
    exists
      ? 'opening the embedded database'
      : 'creating the embedded database (PGlite initdb: the first start waits for it)',
  );
  const sayFailed = (error: Error): void => {
    logger.fatal({ err: error, dir: db.embeddedDir }, error.message);
  };
  // Nothing more can be asked of it (embedded.ts): the process stops, through the graceful shutdown
  // when serving, so the requests under way get their 503 first; a restart recovers the folder.
  const {
    pglite,
    ClientPgLite,
    close: closePGlite,
    failed,
  } = await openPGlite(
    db.embeddedDir,
    db.statementTimeoutMs,
    (error) => {
      sayFailed(error);
      process.exitCode = 1;
      // Before the shutdown handler is in place (start-up, the migrate command) the error itself ends the process.
      if (process.listenerCount('SIGTERM') > 0) process.emit('SIGTERM', 'SIGTERM');
    },
    (error) => {
      // This thread never gets back from the statement: no request can be answered, so the process ends here.
      try {
        sayFailed(error);
      } finally {
        process.exit(1);
      }
    },
  );
  const instance = knex({
    client: requestClient(ClientPgLite),
    dialect: 'postgres',
    connection: () => ({ pglite }) as unknown as Knex.StaticConnectionConfig,
    log: knexLog(logger),
  });
  // PGlite keeps no statements between queries, and nothing cuts one short: it does not enforce
  // statement_timeout, and it runs in this thread, where no timer fires until the statement ends.
  const run = statementRunner(instance, pgliteSend, (_connection, send) => send());
  return {
    knex: instance,
    // PGlite has one session: a probe waits for it, and cannot time out while a statement holds this thread.
    isStandby: () => standby(instance),
    kind: 'embedded',
    run,
    // No standbys: every read on the one database.
    reads: readRouter({
      primary: run,
      positionKnex: instance,
      maxLagMs: db.readMaxLagMs,
      logger,
      standbys: [],
    }),
    // PGlite has one session: migrations share it, and the time-out they set there is not enforced.
    forMigrations: () => ({
      knex: instance,
      timeoutMs: db.migrationTimeoutMs,
      lockTimeoutMs: db.migrationLockTimeoutMs,
      close: () => Promise.resolve(),
    }),
    close: async () => {
      // After a failure PGlite is asked nothing more; closing it then only gives back its folder.
      if (!failed()) await instance.destroy();
      await closePGlite();
    },
  };
}

/** How long a probe or a scrape waits for the database before it answers without it. */
export const DATABASE_CHECK_TIMEOUT_MS = 1000;

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
