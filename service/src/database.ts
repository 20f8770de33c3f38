import { mkdirSync } from 'node:fs';
import type { Extension, PGlite } from '@electric-sql/pglite';
import knex, { type Knex } from 'knex';
import { exclusiveOnPostgres } from './migrator';
import type { Logger } from './logger';
import type { Settings } from './settings';
import type { Statement } from './statements';

export interface Database {
  knex: Knex;
  kind: 'postgres' | 'embedded';
  /** Runs `work` while no other process sharing this database runs its own `exclusive` work. */
  exclusive<T>(work: () => Promise<T>, waitMs: number, onWait?: () => void): Promise<T>;
  /** Runs a statement (see statements.ts) on a connection of the pool; its rows. */
  run<Row, P extends object>(statement: Statement<P>, params: P): Promise<Row[]>;
  close(): Promise<void>;
}

/** The driver connection knex's pool lends: pg's Client, or the PGlite instance itself. */
interface DriverConnection {
  query(
    query: string | { name: string; text: string; values: unknown[] },
    values?: unknown[],
  ): Promise<{ rows: unknown[] }>;
}

/**
 * Statements go straight to a connection from knex's pool, past knex's query runner: the pool's
 * limits and acquire time-out still hold, and a knex transaction holding PGlite's one connection
 * still keeps them out until it ends. PostgreSQL gets a named prepared statement (parsed and
 * planned once per connection; pg remembers which names each connection has prepared); PGlite,
 * which keeps no statements between queries, gets the text each time.
 */
function statementRunner(instance: Knex, named: boolean): Database['run'] {
  const client = instance.client as {
    acquireConnection(): Promise<DriverConnection>;
    releaseConnection(connection: DriverConnection): Promise<unknown>;
  };
  return async <Row, P extends object>(statement: Statement<P>, params: P) => {
    const { text, values } = statement.compile(instance);
    const connection = await client.acquireConnection();
    try {
      const result = named
        ? await connection.query({ name: statement.name, text, values: values(params) })
        : await connection.query(text, values(params));
      return result.rows as Row[];
    } finally {
      void client.releaseConnection(connection);
    }
  };
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
      run: statementRunner(instance, true),
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
    run: statementRunner(instance, false),
    close: async () => {
      await instance.destroy();
      if (!pglite.closed) await pglite.close();
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
