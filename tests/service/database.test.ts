import type { Knex } from 'knex';
import { openDatabase, type Database } from '../../service/src/db/connection';
import { knownMigrations, migrateToLatest } from '../../service/src/db/migrator';
import { statement } from '../../service/src/db/statements';
import { createLogger } from '../../service/src/logger';
import { loadSettings } from '../../service/src/settings';
import { sleep } from '../../tools/harness/client';
import { countOf } from '../../tools/harness/postgres';
import { describeOnPostgres, freshDatabaseEnv, postgresConnection, testEnv } from './helpers';

/**
 * The database layer against a real PostgreSQL: the client-side statement deadline, prepared
 * statements on and off, and the migrations' transaction-level lock. PGlite has one session in
 * this thread, so none of these applies there (its time-out is the server's own).
 */
const logger = createLogger('silent');

const echo = statement<{ n: number }>('database_test_echo', (knex, param) =>
  knex.raw('SELECT ?::int AS n', [param('n')]),
);

describeOnPostgres('On PostgreSQL', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabaseEnv>>;
  let admin: Knex;
  const opened: Database[] = [];
  const open = async (env: Record<string, string>) => {
    const db = await openDatabase(loadSettings(testEnv({ ...fresh.env, ...env })), logger);
    opened.push(db);
    return db;
  };

  beforeAll(async () => {
    fresh = await freshDatabaseEnv();
    admin = postgresConnection(fresh.env.DB_NAME);
  });
  afterAll(async () => {
    await Promise.all(opened.map((db) => db.close()));
    await admin.destroy();
    await fresh.drop();
  });

  const running = (text: string): Promise<number> =>
    countOf(admin, "pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query = ?", [
      text,
    ]);

  test('When a statement outlives DB_STATEMENT_TIMEOUT_MS, then the caller gets a 57014 error within the deadline and its grace, and the statement no longer runs on the server', async () => {
    const db = await open({ DB_STATEMENT_TIMEOUT_MS: '300' });
    const sql = 'SELECT pg_sleep(20) /* deadline test */';
    const started = performance.now();
    await expect(db.knex.raw(sql)).rejects.toMatchObject({ code: '57014' });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(300 + 500 + 500);
    expect(await running(sql)).toBe(0);
    // The pool serves the next statement on a fresh connection.
    expect((await db.run<{ n: number }, { n: number }>(echo, { n: 7 }))[0]).toEqual({ n: 7 });
  });

  test("When a change draws a warning that is not the end of a wait for a standby (a trigger's), then it stands and is answered as made", async () => {
    await admin.raw('CREATE TABLE warned (n int)');
    await admin.raw(
      "CREATE FUNCTION warn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE WARNING 'a warning of its own'; RETURN NEW; END $$",
    );
    await admin.raw(
      'CREATE TRIGGER warned_insert BEFORE INSERT ON warned FOR EACH ROW EXECUTE FUNCTION warn()',
    );
    const db = await open({});
    // Outside a transaction the INSERT decides its change: a warning there would count if any did.
    await expect(db.knex('warned').insert({ n: 1 })).resolves.toBeDefined();
    expect(await countOf(admin, 'warned')).toBe(1);
  });

  test('When a statement waits on a lock past its deadline, then it is cancelled, and the lock holder is untouched', async () => {
    const db = await open({ DB_STATEMENT_TIMEOUT_MS: '300' });
    await db.knex.raw('CREATE TABLE IF NOT EXISTS locked_here (id int)');
    const locker = postgresConnection(fresh.env.DB_NAME);
    const holder = await locker.transaction();
    try {
      await holder.raw('LOCK TABLE locked_here IN ACCESS EXCLUSIVE MODE');
      await expect(db.knex('locked_here').select('id')).rejects.toMatchObject({ code: '57014' });
      expect(
        await countOf(
          admin,
          "pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        ),
      ).toBe(0);
      expect((await holder.raw<{ rows: unknown[] }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await holder.rollback();
      await locker.destroy();
    }
  });

  test.each([
    ['true', ['database_test_echo']],
    ['false', []],
  ])(
    'When DB_PREPARED_STATEMENTS is %s, then the connection holds the named statements %j and answers alike',
    async (prepared, names) => {
      // One connection, so the check below reads the session the statement ran on.
      const db = await open({ DB_PREPARED_STATEMENTS: prepared, DB_POOL_MAX: '1' });
      expect(await db.run(echo, { n: 41 })).toEqual([{ n: 41 }]);
      expect(await db.run(echo, { n: 42 })).toEqual([{ n: 42 }]);
      const { rows } = await db.knex.raw<{ rows: { name: string }[] }>(
        'SELECT name FROM pg_prepared_statements ORDER BY name',
      );
      expect(rows.map((r) => r.name)).toEqual(names);
    },
  );

  test("When the request time-out is 300 ms, then a statement of 1 s still completes on the migrations' connection, which has DB_MIGRATION_TIMEOUT_MS", async () => {
    const db = await open({ DB_STATEMENT_TIMEOUT_MS: '300', DB_MIGRATION_TIMEOUT_MS: '5000' });
    await expect(db.knex.raw('SELECT pg_sleep(1)')).rejects.toMatchObject({ code: '57014' });
    const migrations = db.forMigrations();
    try {
      expect(migrations.timeoutMs).toBe(5000);
      const { rows } = await migrations.knex.raw<{ rows: { slept: string }[] }>(
        'SELECT pg_sleep(1)::text AS slept',
      );
      expect(rows).toEqual([{ slept: '' }]);
    } finally {
      await migrations.close();
    }
  });

  test('When the replica holding the migration lock dies, then the lock goes with its connection and a waiting replica migrates', async () => {
    const other = await freshDatabaseEnv();
    const direct = postgresConnection(other.env.DB_NAME);
    try {
      // Another replica mid-migration: the lock (see service/src/db/lock.ts) held in a transaction.
      const holder = await direct.transaction();
      await holder.raw('SELECT pg_advisory_xact_lock(7262017450)');
      const { rows } = await holder.raw<{ rows: { pid: number }[] }>('SELECT pg_backend_pid() AS pid');
      const db = await openDatabase(loadSettings(testEnv({ ...other.env, LOG_LEVEL: 'silent' })), logger);
      opened.push(db);
      let done = false;
      const migrated = migrateToLatest(db, logger).finally(() => {
        done = true;
      });
      await sleep(700);
      expect(done).toBe(false);
      await admin.raw('SELECT pg_terminate_backend(?)', [rows[0]?.pid ?? 0]);
      expect(await migrated).toHaveLength(knownMigrations().length);
      await holder.rollback().catch(() => undefined);
    } finally {
      await direct.destroy();
      await other.drop();
    }
  });
});

test('When the database is embedded, then statements run as text on its one session', async () => {
  const db = await openDatabase(loadSettings(testEnv({ DB_HOSTNAME: '' })), logger);
  try {
    expect(db.kind).toBe('embedded');
    expect(await db.run(echo, { n: 5 })).toEqual([{ n: 5 }]);
  } finally {
    await db.close();
  }
});
