import {
  call,
  author,
  isProblem,
  report,
  sleep,
  startService,
  statusCounts,
  type Answer,
  scratchDatabase,
} from './support';

const STATEMENT_TIMEOUT_MS = 2000;
const POOL_MAX = 4;
const BURST = 40;
/**
 * The longest a request can rightly take here: up to two waits for a connection (2.5 s each: the
 * token's user, then the post query) and one statement time-out, plus slack for a busy machine.
 */
const BOUNDED_MS = 2 * 2500 + STATEMENT_TIMEOUT_MS + 5000;

const database = scratchDatabase('slow');

const serviceQueries = async (state?: string): Promise<number> => {
  const rows = (
    await database.db.raw<{ rows: { n: number }[] }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'social-posts' AND datname = ?${
        state ? ' AND state = ?' : ''
      }`,
      state ? [database.name, state] : [database.name],
    )
  ).rows;
  return rows[0]?.n ?? 0;
};

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
        return call(svc.base, '/votes/', { ...options, json: { post_id: postId, dir: 1 } });
    }
  };

  // PostgreSQL made slow from outside: while this lock is held, every query on posts waits.
  const lock = await database.db.transaction();
  await lock.raw('LOCK TABLE posts IN ACCESS EXCLUSIVE MODE');
  let single: Answer;
  let burst: Answer[];
  let liveDuring: number;
  let stuckAfter: number;
  let burstWallMs: number;
  try {
    single = await call(svc.base, '/posts/public', { timeoutMs: 30_000 });
    const burstStarted = Date.now();
    const pending = Array.from({ length: BURST }, (_, i) => mixed(i));
    liveDuring = (await call(svc.base, '/healthz/live')).status;
    burst = await Promise.all(pending);
    burstWallMs = Date.now() - burstStarted;
    // Cancelled statements leave no query behind on the server.
    await sleep(500);
    stuckAfter = await serviceQueries('active');
  } finally {
    await lock.rollback();
  }

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
  expect(connections).toBeLessThanOrEqual(POOL_MAX);
});
