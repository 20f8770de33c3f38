import {
  ACCOUNT_PASSWORD,
  call,
  author,
  isProblem,
  OwnPostgres,
  report,
  startOn,
  stopAllServices,
  waitForStatus,
  type Answer,
  vote,
} from './support';

/** Longest a call may take while the database is away: connect (2 s) or acquire (2.5 s) time-out, plus slack. */
const BOUNDED_MS = 8000;

const own = new OwnPostgres();

beforeAll(async () => {
  await own.init();
  own.start();
});

afterAll(async () => {
  await stopAllServices();
  own.destroy();
});

/** One call of each kind the API serves (reads, writes, a login), each named, as `token`'s user. */
function everyKindOfCall(
  base: string,
  token: string,
  postId: number | undefined,
): [string, () => Promise<Answer>][] {
  const timeoutMs = 20_000;
  const login = { username: 'loss@example.com', password: ACCOUNT_PASSWORD };
  return [
    ['public list', () => call(base, '/posts/public', { timeoutMs })],
    ['list', () => call(base, '/posts/', { token, timeoutMs })],
    ['get', () => call(base, `/posts/${String(postId)}`, { token, timeoutMs })],
    ['vote', () => vote(base, token, postId, 1, timeoutMs)],
    ['create', () => call(base, '/posts/', { token, json: { title: 't', content: 'c' }, timeoutMs })],
    ['login', () => call(base, '/login', { form: login, timeoutMs })],
  ];
}

test('When the database goes away and comes back, then ready is 503 within 2 s while live stays 200 and the API answers 503 problem+json, and ready is 200 again within 5 s in the same process', async () => {
  const svc = await startOn(own.port, 'postgres');
  const {
    token,
    posts: [postId],
  } = await author(svc.base, 'loss@example.com', 3);
  const calls = everyKindOfCall(svc.base, token, postId);
  // Every pooled connection is in use once, so the loss hits live connections too.
  await Promise.all(Array.from({ length: 12 }, () => call(svc.base, '/posts/public')));

  own.stop();
  const stoppedAt = Date.now();
  const readyStatus = await waitForStatus(svc.base, '/healthz/ready', 503, 10_000);
  const readyDownMs = Date.now() - stoppedAt;
  const live = await Promise.all([1, 2, 3].map(() => call(svc.base, '/healthz/live')));

  const down: { name: string; answer: Answer }[] = [];
  for (const [name, fn] of calls) down.push({ name, answer: await fn() });
  // More requests at once than the pool has connections: each still answers, none hangs.
  const burst = await Promise.all(
    Array.from({ length: 30 }, () => call(svc.base, '/posts/public', { timeoutMs: 20_000 })),
  );
  const aliveWhileDown = svc.child.exitCode === null;

  own.start();
  const restartedAt = Date.now();
  const readyAgain = await waitForStatus(svc.base, '/healthz/ready', 200, 10_000);
  const readyUpMs = Date.now() - restartedAt;
  const up: { name: string; answer: Answer }[] = [];
  for (const [name, fn] of calls) up.push({ name, answer: await fn() });

  const slowest = Math.max(...[...down.map((d) => d.answer), ...burst].map((a) => a.ms));
  report('database loss', {
    readyDownMs,
    live: live.map((l) => l.status).join(','),
    downStatuses: down.map((d) => `${d.name}:${d.answer.status}`).join(','),
    burst503: burst.filter((a) => a.status === 503).length,
    slowestDownAnswerMs: Math.round(slowest),
    readyUpMs,
    upStatuses: up.map((d) => `${d.name}:${d.answer.status}`).join(','),
    samePid: svc.child.exitCode === null,
  });

  expect(readyStatus?.status).toBe(503);
  expect(readyDownMs).toBeLessThanOrEqual(2000);
  expect(live.map((l) => l.status)).toEqual([200, 200, 200]);
  for (const { name, answer } of [...down, ...burst.map((answer) => ({ name: 'burst', answer }))]) {
    expect({ name, status: answer.status, problem: isProblem(answer) }).toEqual({
      name,
      status: 503,
      problem: true,
    });
    expect(answer.ms).toBeLessThan(BOUNDED_MS);
  }
  expect(aliveWhileDown).toBe(true);
  expect(readyAgain?.status).toBe(200);
  expect(readyUpMs).toBeLessThanOrEqual(5000);
  expect(up.map((u) => `${u.name}:${u.answer.status}`)).toEqual([
    'public list:200',
    'list:200',
    'get:200',
    'vote:201',
    'create:201',
    'login:200',
  ]);
  expect(svc.child.exitCode).toBeNull();
});
