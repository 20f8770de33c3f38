import type { Knex } from 'knex';
import { withRequestBudget } from '../../service/src/db/budget';
import { openDatabase, type Database } from '../../service/src/db/connection';
import { CANCEL_GRACE_MS } from '../../service/src/db/deadline';
import { isDatabaseUnavailable } from '../../service/src/db/errors';
import { statement } from '../../service/src/db/statements';
import { createLogger } from '../../service/src/logger';
import { loadSettings } from '../../service/src/settings';
import { sleep } from '../../tools/harness/client';
import { countOf } from '../../tools/harness/postgres';
import { describeOnPostgres, freshDatabaseEnv, postgresConnection, testEnv } from './helpers';

/**
 * A request's database budget (db/budget.ts): its waits for a pooled connection and its statements
 * together get DB_STATEMENT_TIMEOUT_MS, on either database kind; outside a request each statement
 * keeps its own deadline.
 */
const logger = createLogger('silent');
const BUDGET_MS = 600;
/** Room for a busy machine on top of a bound. */
const SLACK_MS = 400;

const echo = statement<{ n: number }>('budget_test_echo', (knex, param) =>
  knex.raw('SELECT ?::int AS n', [param('n')]),
);

let fresh: Awaited<ReturnType<typeof freshDatabaseEnv>>;
let db: Database;

beforeAll(async () => {
  fresh = await freshDatabaseEnv();
  // One connection, so a transaction outside any request can hold the whole pool.
  db = await openDatabase(
    loadSettings(testEnv({ ...fresh.env, DB_STATEMENT_TIMEOUT_MS: String(BUDGET_MS), DB_POOL_MAX: '1' })),
    logger,
  );
});
afterAll(async () => {
  await db.close();
  await fresh.drop();
});

/** `work` as a request's handling runs it; a knex query starts when awaited, so it is awaited inside. */
const inRequest = <T>(work: () => PromiseLike<T>): Promise<T> =>
  withRequestBudget(BUDGET_MS, async () => await work());

/** How long `work` took to settle, and how: its error, when it failed. */
async function timed(work: Promise<unknown>): Promise<{ ms: number; error?: unknown }> {
  const started = performance.now();
  try {
    await work;
    return { ms: performance.now() - started };
  } catch (error) {
    return { ms: performance.now() - started, error };
  }
}

const pool = (): { numUsed(): number; numFree(): number; numPendingAcquires(): number } =>
  (db.knex.client as { pool: ReturnType<typeof pool> }).pool;

test.each([
  ['a prepared statement (db.run)', () => db.run(echo, { n: 1 })],
  ['a knex query', () => db.knex.raw('SELECT 1')],
])(
  'When every pooled connection stays busy past the budget, then %s in a request fails within the budget as the database unavailable, and the connection it waited for goes back to the pool',
  async (_label, query) => {
    // Held until the request gives up, which without a budget would be the pool's own 2.5 s wait.
    const holder = await db.knex.transaction();
    let waited: { ms: number; error?: unknown };
    try {
      await holder.raw('SELECT 1');
      waited = await timed(inRequest(query));
    } finally {
      await holder.commit();
    }
    expect(waited.error).toMatchObject({ name: 'RequestBudgetError' });
    expect((waited.error as Error).message).toMatch(/no pooled connection .* budget of 600 ms/);
    expect(isDatabaseUnavailable(waited.error)).toBe(true);
    expect(waited.ms).toBeGreaterThanOrEqual(BUDGET_MS - 20);
    expect(waited.ms).toBeLessThan(BUDGET_MS + SLACK_MS);
    // The pool lends its one connection again, and nothing waits for it any more.
    expect(await db.run(echo, { n: 2 })).toEqual([{ n: 2 }]);
    expect({ used: pool().numUsed(), pending: pool().numPendingAcquires() }).toEqual({ used: 0, pending: 0 });
  },
);

test('When no request is running, then a wait for a connection is not bounded by a budget', async () => {
  const holder = await db.knex.transaction();
  const waiting = timed(db.run(echo, { n: 3 }));
  await sleep(BUDGET_MS + 200);
  await holder.commit();
  const waited = await waiting;
  expect(waited.error).toBeUndefined();
  expect(waited.ms).toBeGreaterThanOrEqual(BUDGET_MS + 150);
});

test('When a request spent its budget waiting, then its next ask fails at once, even with a connection free', async () => {
  const holder = await db.knex.transaction();
  await holder.raw('SELECT 1');
  // The pool is let go of from outside the request, once the request has given up waiting.
  const released = sleep(BUDGET_MS + 100).then(() => holder.commit());
  const { first, second } = await inRequest(async () => {
    const waited = await timed(db.run(echo, { n: 4 }));
    await released;
    return { first: waited, second: await timed(db.run(echo, { n: 5 })) };
  });
  expect(first.error).toMatchObject({ name: 'RequestBudgetError' });
  expect(second.error).toMatchObject({ name: 'RequestBudgetError' });
  expect((second.error as Error).message).toMatch(/budget of 600 ms .* was spent/);
  expect(second.ms).toBeLessThan(SLACK_MS);
  // Outside that request the connection serves at once.
  expect(await db.run(echo, { n: 6 })).toEqual([{ n: 6 }]);
});

test('When a request pauses between its statements for longer than its budget, then the pause does not count: only its waits and statements do', async () => {
  // A slow upload read after the caller's user was looked up, say: not the database's time.
  const rows = await inRequest(async () => {
    await db.run(echo, { n: 7 });
    await sleep(BUDGET_MS + 100);
    return db.run(echo, { n: 8 });
  });
  expect(rows).toEqual([{ n: 8 }]);
});

test("When DB_STATEMENT_TIMEOUT_MS is its least, 200, then it is accepted and a request's waits and statements fit its budget; half of it refuses them", async () => {
  const least = loadSettings(testEnv({ ...fresh.env, DB_STATEMENT_TIMEOUT_MS: '200' })).db.statementTimeoutMs;
  expect(least).toBe(200);
  // Three waits for a connection and three statements: the caller's user, the post, the change, say.
  const work = async () => [
    await db.run(echo, { n: 9 }),
    await db.run(echo, { n: 10 }),
    (await db.knex.raw<{ rows: { n: number }[] }>('SELECT 11 AS n')).rows,
  ];
  expect(await withRequestBudget(least, work)).toEqual([[{ n: 9 }], [{ n: 10 }], [{ n: 11 }]]);
  // The floor the setting had: the first wait leaves less than a statement is sent with.
  const half = await timed(withRequestBudget(least / 2, work));
  expect(half.error).toMatchObject({ name: 'RequestBudgetError' });
  expect((half.error as Error).message).toMatch(/budget of 100 ms .* was spent/);
});

describeOnPostgres('On PostgreSQL, where a statement is cancelled from the client side', () => {
  let admin: Knex;
  beforeAll(() => {
    admin = postgresConnection(fresh.env.DB_NAME);
  });
  afterAll(async () => {
    await admin.destroy();
  });

  test('When a request runs two statements that each fit DB_STATEMENT_TIMEOUT_MS but not together, then the second is cancelled when the budget runs out', async () => {
    // 0.35 s and 0.4 s: each within the 0.6 s statement time-out, their sum not.
    const run = await timed(
      inRequest(async () => {
        await db.knex.raw('SELECT pg_sleep(0.35)');
        await db.knex.raw('SELECT pg_sleep(0.4) /* budget test */');
      }),
    );
    expect(run.error).toMatchObject({ code: '57014', name: 'StatementTimeoutError' });
    expect((run.error as Error).message).toMatch(/budget of 600 ms/);
    expect(run.ms).toBeLessThan(BUDGET_MS + CANCEL_GRACE_MS + SLACK_MS);
    expect(
      await countOf(
        admin,
        "pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%budget test%' AND pid <> pg_backend_pid()",
      ),
    ).toBe(0);
    // Outside a request, the same two statements each keep their own deadline and both complete.
    await db.knex.raw('SELECT pg_sleep(0.35)');
    await db.knex.raw('SELECT pg_sleep(0.4)');
  });
});
