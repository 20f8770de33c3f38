import type { Knex } from 'knex';
import { migrations } from '../../migrations';
import { account, call, report, scratchDatabase, startService } from './support';

const REPLICAS = 3;

const concurrent = scratchDatabase('startup');
const reference = scratchDatabase('startup_ref');

/** Everything that makes up the schema, in a stable order, so two databases can be compared whole. */
async function schemaOf(db: Knex): Promise<string[]> {
  const rows = async (sql: string) => (await db.raw<{ rows: { d: string }[] }>(sql)).rows.map((r) => r.d);
  return [
    ...(await rows(
      "SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS d FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1",
    )),
    ...(await rows(
      "SELECT 'index ' || indexdef AS d FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    )),
    ...(await rows(
      "SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(c.oid) AS d FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public' ORDER BY 1",
    )),
    ...(await rows("SELECT 'extension ' || extname AS d FROM pg_extension ORDER BY 1")),
  ];
}

test('When three processes start at once on an empty database, then all become ready, the migrations ran once and the schema is whole', async () => {
  // The reference: the same migrations applied by a single process, with nobody racing it.
  const single = await startService({ DB_NAME: reference.name });
  single.child.kill('SIGKILL');
  await single.exited;
  const expected = await schemaOf(reference.db);

  const started = Date.now();
  const replicas = await Promise.all(
    Array.from({ length: REPLICAS }, () =>
      startService({ DB_NAME: concurrent.name, SHUTDOWN_DELAY_SECONDS: '0' }),
    ),
  );
  const ready = await Promise.all(replicas.map((r) => call(r.base, '/healthz/ready')));
  const allReadyMs = Date.now() - started;

  const db = concurrent.db;
  const applied = await db<{ name: string }>('knex_migrations').select('name').orderBy('id');
  const lock = await db<{ is_locked: number }>('knex_migrations_lock').select('is_locked');
  const actual = await schemaOf(db);

  // The three share one database: what one writes, the others serve.
  const token = await account(replicas[0]?.base ?? '', 'replica@example.com');
  const created = await call(replicas[1]?.base ?? '', '/posts/', {
    token,
    json: { title: 'shared', content: 'c' },
  });
  const seen = await call(replicas[2]?.base ?? '', '/posts/public');

  // The lock is free between a migrator's steps, so another replica may take the next one: each
  // migration must have been applied by exactly one replica.
  const appliedBy = replicas.map((r) =>
    r.lines.filter((l) => l.msg === 'migrations applied').flatMap((l) => l.migrations as string[]),
  );
  const migrators = appliedBy.filter((names) => names.length > 0).length;
  report('concurrent start-up', {
    replicas: REPLICAS,
    ready: ready.map((r) => r.status).join(','),
    allReadyMs,
    replicasThatMigrated: migrators,
    migrationRows: applied.length,
    migrationsDefined: Object.keys(migrations).length,
    schemaItems: actual.length,
    schemaMatchesSingleRun: JSON.stringify(actual) === JSON.stringify(expected),
  });

  expect(ready.map((r) => r.status)).toEqual(Array.from({ length: REPLICAS }, () => 200));
  expect(applied.map((a) => a.name)).toEqual(Object.keys(migrations).sort());
  expect(lock).toEqual([{ is_locked: 0 }]);
  expect(appliedBy.flat().sort()).toEqual(Object.keys(migrations).sort());
  expect(actual).toEqual(expected);
  expect(created.status).toBe(201);
  expect((seen.body as { title: string }[]).map((p) => p.title)).toEqual(['shared']);
  for (const r of replicas) expect(r.child.exitCode).toBeNull();
});
