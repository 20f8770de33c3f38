import type { Knex } from 'knex';
import { migrations } from '../../migrations';
import { serviceEnv } from '../../tools/harness/env';
import { OwnPgBouncer } from '../../tools/harness/pgbouncer';
import { pollUntil } from '../../tools/harness/poll';
import { detailOf } from '../../tools/harness/problem';
import { knexTo, postgresServer } from '../../tools/harness/postgres';
import { Relay } from '../../tools/harness/relay';
import { spawnScript } from '../../tools/harness/service';
import {
  account,
  call,
  countOf,
  expectAllStored,
  isProblem,
  pg,
  report,
  scratchDatabase,
  sleep,
  startOn,
  statusCounts,
  stopAllServices,
  whileRunning,
  type Answer,
  type ServiceProcess,
  vote,
  whilePostsLocked,
} from './support';

/**
 * The service behind a real PgBouncer in transaction mode, as CloudNativePG's Pooler and most
 * managed poolers run it, with nothing set on the pooler's side for it: 1.18 (Debian 12's, which
 * tracks no prepared statements, so the service runs with DB_PREPARED_STATEMENTS=false) and
 * 1.24.1 (which tracks them; the service's defaults). The pooler's server pool is smaller than
 * the service's, so server connections are shared between clients and between processes.
 */
const SERVER_POOL = 3;
const SERVICE_POOL = 8;
const STATEMENT_TIMEOUT_MS = 1500;
const LOAD_MS = 4000;
const WORKERS_PER_PROCESS = 8;

/** A PgBouncer of `version` in front of this suite's server and a scratch database, for one describe block. */
function pooled(version: '1.18' | '1.24', label: string) {
  const database = scratchDatabase(label);
  const bouncer = new OwnPgBouncer({
    version,
    target: { host: pg.host, port: pg.port },
    poolSize: SERVER_POOL,
  });
  beforeAll(() => bouncer.start());
  afterAll(async () => {
    await stopAllServices();
    await bouncer.destroy();
  });
  return { bouncer, database };
}

const versions: { version: '1.18' | '1.24'; env: Record<string, string> }[] = [
  { version: '1.18', env: { DB_PREPARED_STATEMENTS: 'false' } },
  { version: '1.24', env: {} },
];

describe.each(versions)('Behind PgBouncer $version in transaction mode', ({ version, env }) => {
  const { bouncer, database } = pooled(version, `pgb${version.replace('.', '')}`);
  let replicas: ServiceProcess[] = [];
  const start = () =>
    startOn(bouncer.port, database.name, {
      DB_POOL_MAX: String(SERVICE_POOL),
      DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
      SHUTDOWN_DELAY_SECONDS: '0',
      ...env,
    });

  test(`When two processes cold-start together on an empty database through PgBouncer ${version}, then both become ready, the migrations ran once, and a restarted process starts and serves`, async () => {
    const started = Date.now();
    replicas = await Promise.all([start(), start()]);
    const ready = await Promise.all(replicas.map((r) => call(r.base, '/healthz/ready')));
    const allReadyMs = Date.now() - started;
    const applied = await database.db<{ name: string }>('knex_migrations').select('name');

    const [first, second] = replicas as [ServiceProcess, ServiceProcess];
    expect(await first.stop('SIGTERM')).toBe(0);
    const restarted = await start();
    const restartedReady = (await call(restarted.base, '/healthz/ready')).status;
    const served = (await call(restarted.base, '/posts/public')).status;
    replicas = [restarted, second];
    report(`pgbouncer ${version} start-up`, {
      pgbouncer: bouncer.version,
      ready: ready.map((r) => r.status).join(','),
      allReadyMs,
      migrationRows: applied.length,
      restartedReady,
    });

    expect(ready.map((r) => r.status)).toEqual([200, 200]);
    // About 2 s here: one waits for the other's migrations, not for a time-out of the pooler's.
    expect(allReadyMs).toBeLessThan(30_000);
    expect(applied.map((a) => a.name).sort()).toEqual(Object.keys(migrations).sort());
    expect(restartedReady).toBe(200);
    expect(served).toBe(200);
  });

  test(`When a mixed read and write load runs from two processes through PgBouncer ${version}, then no answer is a 5xx and every acknowledged write is in the database`, async () => {
    const tokens = await Promise.all(
      replicas.map((r, i) => account(r.base, `load${String(i)}-${version}@example.com`)),
    );
    const acknowledged: number[] = [];
    const answers: { status: number }[] = [];
    const worker = (base: string, token: string, n: number) => {
      let mine: number | undefined;
      return async (i: number) => {
        switch (i % 5) {
          case 0: {
            const answer = await call(base, '/posts/', {
              token,
              json: { title: `mixed w${String(n)} ${String(i)}`, content: 'c' },
            });
            if (answer.status === 201) {
              mine = (answer.body as { id: number }).id;
              acknowledged.push(mine);
            }
            answers.push(answer);
            break;
          }
          case 1:
            answers.push(await call(base, '/posts/public?limit=20'));
            break;
          case 2:
            // A term the title index serves: one that has none is limited per process, by design.
            answers.push(await call(base, '/posts/?search=mixed', { token }));
            break;
          case 3:
            answers.push(await call(base, `/posts/${String(mine ?? 1)}`, { token }));
            break;
          default:
            answers.push(await vote(base, token, mine ?? 1, i % 2));
        }
      };
    };
    const failures = await whileRunning(
      LOAD_MS,
      replicas.flatMap((r, p) =>
        Array.from({ length: WORKERS_PER_PROCESS }, (_, w) => worker(r.base, tokens[p] ?? '', p * 100 + w)),
      ),
    );
    const stored = await database.db<{ id: number }>('posts').whereIn('id', acknowledged).pluck('id');
    const pools = await bouncer.admin('SHOW POOLS');
    report(`pgbouncer ${version} load`, {
      answers: answers.length,
      statuses: statusCounts(answers),
      acknowledgedWrites: acknowledged.length,
      storedWrites: stored.length,
      transportFailures: failures.length,
      serverConnections: pools
        .filter((p) => p.database === database.name)
        .map((p) => Number(p.sv_active) + Number(p.sv_idle) + Number(p.sv_used))
        .join(','),
    });

    expect(failures).toEqual([]);
    expect(answers.filter((a) => a.status >= 500)).toEqual([]);
    expect(answers.length).toBeGreaterThan(100);
    expect(acknowledged.length).toBeGreaterThan(10);
    expectAllStored(stored, acknowledged);
  });

  test(`When a table is locked past the statement time-out through PgBouncer ${version}, then the list answers 503 problem+json in bounded time, the statement is gone from the server, and the list serves again once the lock is released`, async () => {
    const [svc] = replicas as [ServiceProcess];
    const { answer, waitingAfter } = await whilePostsLocked(database.db, async () => {
      const answer = await call(svc.base, '/posts/public', { timeoutMs: 20_000 });
      await sleep(300);
      // Behind the pooler the server sees PgBouncer's connections: any statement of the
      // scratch database still waiting on the lock, other than the locker's own, is left over.
      const waitingAfter = await countOf(
        database.db,
        "pg_stat_activity WHERE datname = ? AND wait_event_type = 'Lock'",
        [database.name],
      );
      return { answer, waitingAfter };
    });
    const after = await call(svc.base, '/posts/public');
    report(`pgbouncer ${version} locked table`, {
      status: answer.status,
      ms: Math.round(answer.ms),
      statementsLeftWaiting: waitingAfter,
      afterStatus: after.status,
    });

    expect({ status: answer.status, problem: isProblem(answer) }).toEqual({ status: 503, problem: true });
    expect(answer.ms).toBeGreaterThanOrEqual(STATEMENT_TIMEOUT_MS - 100);
    // The deadline, the cancel's grace (0.5 s) and slack for a busy machine.
    expect(answer.ms).toBeLessThan(STATEMENT_TIMEOUT_MS + 500 + 1500);
    expect(waitingAfter).toBe(0);
    expect(after.status).toBe(200);
  });
});

describe('Behind PgBouncer 1.18 with the defaults', () => {
  const { bouncer, database } = pooled('1.18', 'pgb118_named');

  test('When named prepared statements stay on behind a pooler that does not track them, then the failures are problem+json and each logged failure names DB_PREPARED_STATEMENTS=false', async () => {
    const svc = await startOn(bouncer.port, database.name, { DB_POOL_MAX: String(SERVICE_POOL) });
    // Registration and login use no named statement; every authenticated call does.
    const token = await account(svc.base, 'named@example.com');
    const answers = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const out: Answer[] = [];
        for (let i = 0; i < 25; i++) out.push(await call(svc.base, '/posts/', { token }));
        return out;
      }),
    ).then((a) => a.flat());
    const failed = answers.filter((a) => a.status >= 500);
    const failedLines = () => svc.lines.filter((l) => l.msg === 'request failed');
    // A log line is read from the child's stdout and may arrive just after its answer.
    await pollUntil(failedLines, (lines) => lines.length >= failed.length, { withinMs: 2000, everyMs: 50 });
    const logged = failedLines();
    report('pgbouncer 1.18 named statements left on', {
      statuses: statusCounts(answers),
      loggedFailures: logged.length,
    });

    expect(failed.length).toBeGreaterThan(0);
    for (const a of failed) expect(isProblem(a)).toBe(true);
    expect(logged.length).toBe(failed.length);
    for (const line of logged) expect(String(line.hint)).toMatch(/set DB_PREPARED_STATEMENTS=false/);
  });
});

const startupOptions = [
  {
    told: 'with its defaults',
    settings: {} as Record<string, string>,
    reason: /unsupported startup parameter/,
    label: 'pgb124_busy',
  },
  {
    // As CloudNativePG's Pooler configures it.
    told: 'told to ignore options',
    settings: { ignore_startup_parameters: 'extra_float_digits,options' },
    reason: /reaches a pooler/,
    label: 'pgb124_busy_ignoring',
  },
];

describe.each(startupOptions)(
  'Behind PgBouncer 1.24 $told, whose server connections are all in use by other clients',
  ({ told, settings, reason: expectedReason, label }) => {
    // Many server connections, each busy most of the time: a statement lands on a random one.
    const SERVERS = 16;
    const database = scratchDatabase(label);
    const bouncer = new OwnPgBouncer({
      version: '1.24',
      target: { host: pg.host, port: pg.port },
      poolSize: SERVERS,
      overrides: { settings },
    });
    beforeAll(() => bouncer.start());
    afterAll(() => bouncer.destroy());

    test("When a migration that runs outside a transaction is undone and applied again through the pooler while other clients use its server connections, then none of their statements is cut off and none runs with the migration's time-outs", async () => {
      const names = Object.keys(migrations).sort();
      const migrate = async (...args: string[]) => {
        const env = serviceEnv(
          {
            DB_HOSTNAME: '127.0.0.1',
            DB_PORT: String(bouncer.port),
            DB_NAME: database.name,
            LOG_LEVEL: 'info',
          },
          'postgres',
        );
        const command = spawnScript('service/src/migrate.ts', env, { args });
        expect(await command.exited).toBe(0);
        return command.lines
          .filter((line) => line.msg?.includes('without session time-outs'))
          .map((line) => String(line.reason));
      };
      await migrate('latest');
      const clients = knexTo(database.name, SERVERS, {
        ...postgresServer,
        host: '127.0.0.1',
        port: bouncer.port,
      });
      const failures: string[] = [];
      const seen = new Map<string, number>();
      const logged: string[] = [];
      let running = true;
      const client = async () => {
        while (running) {
          try {
            const [row] = await rowsOfClient(clients);
            const key = `${row?.lock ?? '?'}/${row?.statement ?? '?'}`;
            seen.set(key, (seen.get(key) ?? 0) + 1);
          } catch (error) {
            failures.push(error instanceof Error ? error.message : String(error));
          }
        }
      };
      const loops = Array.from({ length: SERVERS }, client);
      try {
        // The last migration builds its unique index outside a transaction, and drops it outside one.
        for (let round = 0; round < 3; round++) {
          logged.push(...(await migrate('down', '--to', names.at(-2) ?? '')));
          logged.push(...(await migrate('latest')));
        }
      } finally {
        running = false;
        await Promise.all(loops);
        await clients.destroy();
      }
      report(`pgbouncer 1.24 ${told}: migration beside busy clients`, {
        statements: [...seen.values()].reduce((a, b) => a + b, 0),
        settings: [...seen.keys()].join(','),
        failures: failures.length,
      });

      expect(failures.slice(0, 5)).toEqual([]);
      expect([...seen.keys()]).toEqual(['0/0']);
      // Each run saw it was not on a session of its own, so no time-out went to a shared one.
      expect(logged).toHaveLength(6);
      for (const reason of logged) expect(reason).toMatch(expectedReason);
    });
  },
);

/** One client statement: it holds its server connection a moment and says what time-outs the session has. */
const rowsOfClient = async (k: Knex) =>
  (
    await k.raw<{ rows: { lock: string; statement: string }[] }>(
      "SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement, pg_sleep(0.01)",
    )
  ).rows;

describe('Behind PgBouncer 1.24 whose server connection breaks just after PostgreSQL acted', () => {
  const database = scratchDatabase('pgb124_lost');
  const relay = new Relay(pg.port, pg.host);
  let bouncer: OwnPgBouncer | undefined;
  beforeAll(async () => {
    await relay.start();
    bouncer = new OwnPgBouncer({
      version: '1.24',
      target: { host: '127.0.0.1', port: relay.port },
      poolSize: SERVER_POOL,
    });
    await bouncer.start();
  });
  afterAll(async () => {
    await stopAllServices();
    await bouncer?.destroy();
    await relay.close();
  });

  test("When the server connection breaks after a new post's INSERT or a DELETE's COMMIT reached PostgreSQL, then PgBouncer's error is answered as a change that may or may not stand (not \"try again\"), and the change is stored", async () => {
    const svc = await startOn(bouncer?.port ?? 0, database.name, {
      DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    });
    const token = await account(svc.base, 'pgb-lost@example.com');
    const detail = (a: Answer) => `${String(a.status)} ${detailOf(a)}`;

    relay.loseAnswerTo('insert into "posts"', { close: true });
    const created = await call(svc.base, '/posts/', { token, json: { title: 'lost-insert', content: 'c' } });
    const stored = await countOf(database.db, "posts WHERE title = 'lost-insert'");

    const kept = await call(svc.base, '/posts/', { token, json: { title: 'kept', content: 'c' } });
    const id = (kept.body as { id: number }).id;
    const etag = (await call(svc.base, `/posts/${String(id)}`, { token })).headers.get('etag') ?? '';
    relay.loseAnswerTo('COMMIT', { close: true });
    const deleted = await call(svc.base, `/posts/${String(id)}`, {
      method: 'DELETE',
      token,
      headers: { 'If-Match': etag },
    });
    const left = await countOf(database.db, 'posts WHERE id = ?', [id]);
    report('pgbouncer 1.24 server connection broken after the change', {
      insert: detail(created),
      commit: detail(deleted),
    });

    for (const answer of [created, deleted]) {
      expect(answer.status).toBe(503);
      expect(isProblem(answer)).toBe(true);
      expect(detailOf(answer)).toContain('may or may not stand');
    }
    expect(stored).toBe(1);
    expect(kept.status).toBe(201);
    expect(left).toBe(0);
  });
});
