import {
  call,
  author,
  countOf,
  isProblem,
  report,
  sleep,
  startService,
  statusCounts,
  type Answer,
  scratchDatabase,
  vote,
  whilePostsLocked,
} from './support';
import { CANCEL_GRACE_MS } from '../../service/src/db/deadline';

const STATEMENT_TIMEOUT_MS = 2000;
const POOL_MAX = 4;
const BURST = 40;
/**
 * The longest a request can rightly take here: its database budget (its waits for a connection
 * and its statements together get the statement time-out), the grace of a cancelled statement,
 * plus slack for a busy machine running a burst.
 */
const BOUNDED_MS = STATEMENT_TIMEOUT_MS + CANCEL_GRACE_MS + 2500;

const database = scratchDatabase('slow');

const serviceQueries = (state?: string): Promise<number> =>
  countOf(
    database.db,
    `pg_stat_activity WHERE application_name = 'social-posts' AND datname = ?${
      state ? ' AND state = ?' : ''
    }`,
    state ? [database.name, state] : [database.name],
  );

test('When the database is slow (a query past the statement time-out, more requests than connections), then 503 comes promptly and the pool never deadlocks', async () => {
  const svc = await startService({
    DB_NAME: database.name,
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    DB_POOL_MAX: String(POOL_MAX),
  });
  const { token, posts } = await author(svc.base, 'slow@example.com', 5);
  const mixed = (i: number): Promise<Answer> => {
    const postId = posts[i % posts.length] as number;
    const options = { token, timeoutMs: 30_000 };
    switch (i % 4) {
      case 0:
        return call(svc.base, '/posts/public', options);
      case 1:
        return call(svc.base, '/posts/?search=post', options);
      case 2:
        return call(svc.base, `/posts/${String(postId)}`, options);
      default:
        return vote(svc.base, token, postId, 1, options.timeoutMs);
    }
  };

  // PostgreSQL made slow from outside: while the lock is held, every query on posts waits.
  const { single, burst, liveDuring, stuckAfter, burstWallMs } = await whilePostsLocked(
    database.db,
    async () => {
      const single = await call(svc.base, '/posts/public', { timeoutMs: 30_000 });
      const burstStarted = Date.now();
      const pending = Array.from({ length: BURST }, (_, i) => mixed(i));
      const liveDuring = (await call(svc.base, '/healthz/live')).status;
      const burst = await Promise.all(pending);
      const burstWallMs = Date.now() - burstStarted;
      // Cancelled statements leave no query behind on the server.
      await sleep(500);
      return { single, burst, liveDuring, burstWallMs, stuckAfter: await serviceQueries('active') };
    },
  );

  const after = await Promise.all(Array.from({ length: BURST }, (_, i) => mixed(i)));
  const readyAfter = (await call(svc.base, '/healthz/ready')).status;
  const connections = await serviceQueries();

  report('slow database', {
    timedOutStatus: single.status,
    timedOutAfterMs: Math.round(single.ms),
    statementTimeoutMs: STATEMENT_TIMEOUT_MS,
    poolMax: POOL_MAX,
    burstStatuses: statusCounts(burst),
    burstSlowestMs: Math.round(Math.max(...burst.map((a) => a.ms))),
    burstWallMs,
    liveDuring,
    stuckQueriesAfter: stuckAfter,
    afterStatuses: statusCounts(after),
    readyAfter,
    serverConnections: connections,
  });

  expect(single.status).toBe(503);
  expect(isProblem(single)).toBe(true);
  expect(single.ms).toBeGreaterThanOrEqual(STATEMENT_TIMEOUT_MS - 100);
  expect(single.ms).toBeLessThan(BOUNDED_MS);
  for (const a of burst) {
    expect({ status: a.status, problem: isProblem(a) }).toEqual({ status: 503, problem: true });
    expect(a.ms).toBeLessThan(BOUNDED_MS);
  }
  expect(liveDuring).toBe(200);
  expect(stuckAfter).toBe(0);
  // Once the database is quick again, every request is served (a repeated vote is a 409): no
  // connection was lost or leaked.
  for (const a of after) expect([200, 201, 409]).toContain(a.status);
  expect(readyAfter).toBe(200);
  // The request pool, and the one connection readiness keeps to itself (health.ts).
  expect(connections).toBeLessThanOrEqual(POOL_MAX + 1);
});

/** The connections the service may hold in the case below: fewer than the requests that want one. */
const SMALL_POOL = 2;
/** How long the case below holds its lock: well past a request's budget, so requests queue for a connection. */
const LOCK_HELD_MS = 6000;
/** A new wave of list requests every this many ms while the lock is held, so some arrive to a pool already held. */
const WAVE_EVERY_MS = 500;
const WAVE = 8;
/**
 * The longest an answer may take while the pool is held: the request's database budget (the
 * statement time-out), the grace of the cancel of its statement, and a margin for a busy machine.
 */
const BUDGET_BOUND_MS = STATEMENT_TIMEOUT_MS + CANCEL_GRACE_MS + 1000;

test('When statements queued behind a lock hold every pooled connection, then no answer waits past DB_STATEMENT_TIMEOUT_MS and its cancel grace: those out of time are 503 problem+json with Retry-After, and the service answers normally once the lock goes', async () => {
  const svc = await startService({
    DB_NAME: database.name,
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    DB_POOL_MAX: String(SMALL_POOL),
  });
  const { token } = await author(svc.base, 'pool@example.com', 3);
  // The public list asks the database once; a signed-in list twice (the caller, then the list).
  const list = (i: number): Promise<Answer> =>
    i % 2 === 0
      ? call(svc.base, '/posts/public', { timeoutMs: 30_000 })
      : call(svc.base, '/posts/?search=post', { token, timeoutMs: 30_000 });

  const during: Promise<Answer>[] = [];
  await whilePostsLocked(database.db, async () => {
    const lockedAt = Date.now();
    for (let wave = 0; Date.now() - lockedAt < LOCK_HELD_MS; wave++) {
      for (let i = 0; i < WAVE; i++) during.push(list(wave * WAVE + i));
      await sleep(WAVE_EVERY_MS);
    }
  });
  const answers = await Promise.all(during);
  const after = await Promise.all(Array.from({ length: WAVE }, (_, i) => list(i)));
  // A second round, once the pool has replaced the connections whose statements were cancelled.
  after.push(...(await Promise.all(Array.from({ length: WAVE }, (_, i) => list(i)))));
  const refused = answers.filter((a) => a.status === 503);
  const why = svc.lines
    .filter((line) => line.msg === 'request failed')
    .map((line) => (line.err as { message?: string } | undefined)?.message ?? '');

  report('pool held by slow statements', {
    statementTimeoutMs: STATEMENT_TIMEOUT_MS,
    poolMax: SMALL_POOL,
    lockHeldMs: LOCK_HELD_MS,
    requests: answers.length,
    statuses: statusCounts(answers),
    slowestMs: Math.round(Math.max(...answers.map((a) => a.ms))),
    boundMs: BUDGET_BOUND_MS,
    afterStatuses: statusCounts(after),
    afterSlowestMs: Math.round(Math.max(...after.map((a) => a.ms))),
    reasons: [...new Set(why.map((m) => m.replace(/[0-9]+ ms/g, 'N ms')))].join(' | '),
  });

  for (const a of answers) {
    expect(a.ms).toBeLessThan(BUDGET_BOUND_MS);
    // Requests that arrived just before the lock went may be served; every other one is refused.
    if (a.status !== 200)
      expect({ status: a.status, problem: isProblem(a), retryAfter: a.retryAfter }).toEqual({
        status: 503,
        problem: true,
        retryAfter: '1',
      });
  }
  expect(refused.length).toBeGreaterThan(answers.length / 2);
  // The log says why: no connection came free within the request's budget, or the budget ran out.
  expect(why.some((m) => /connection/.test(m) && /budget/.test(m))).toBe(true);
  for (const a of after) expect(a.status).toBe(200);
});
