import { pollUntil } from '../../tools/harness/poll';
import {
  account,
  call,
  author,
  countOf,
  load,
  report,
  sleep,
  startService,
  type ServiceProcess,
  scratchDatabase,
  untilStopped,
  vote,
} from './support';

const DELAY_S = 3;
const TIMEOUT_S = 15;
const IN_FLIGHT = 5;
const LIST_CONNECTIONS = 4;
const VOTE_CONNECTIONS = 4;

const database = scratchDatabase('shutdown');

interface Probe {
  sentAt: number;
  at: number;
  status: number;
}

/** Polls readiness every 50 ms until stopped; a refused connection is recorded as status 0. */
function pollReadiness(base: string): { probes: Probe[]; stop(): Promise<void> } {
  const probes: Probe[] = [];
  const { stop } = untilStopped([
    async () => {
      const sentAt = Date.now();
      const status = await call(base, '/healthz/ready', { timeoutMs: 3000 }).then(
        (a) => a.status,
        () => 0,
      );
      probes.push({ sentAt, at: Date.now(), status });
      await sleep(50);
    },
  ]);
  return { probes, stop };
}

/** Lists and votes at a steady pace from a few connections each, every answer expected 200 and 201. */
function steadyLoad(base: string, posts: number[], authHeader: Record<string, string>) {
  const lists = load(
    {
      url: base,
      connections: LIST_CONNECTIONS,
      requests: [
        { method: 'GET', path: '/posts/public' },
        { method: 'GET', path: '/posts/?limit=20', headers: authHeader },
      ],
    },
    200,
  );
  // Each connection toggles its own vote on its own post, so every answer is a 201.
  let nextPost = 1;
  const votes = load(
    {
      url: base,
      connections: VOTE_CONNECTIONS,
      setupClient: (client) => {
        const postId = posts[nextPost++ % posts.length] as number;
        const headers = { ...authHeader, 'content-type': 'application/json' };
        client.setRequests([
          { method: 'POST', path: '/votes/', headers, body: JSON.stringify({ post_id: postId, dir: 1 }) },
          { method: 'POST', path: '/votes/', headers, body: JSON.stringify({ post_id: postId, dir: 0 }) },
        ]);
      },
    },
    201,
  );
  return { lists, votes };
}

/**
 * The slow database call: a vote's foreign-key check waits while a transaction here holds the
 * post's row lock, so these requests stay in flight across the signal and the listener's close.
 * Returns the lock's transaction, the answers to come and how many were seen waiting on it.
 */
async function heldInFlight(base: string, voters: string[], lockedPost: number) {
  const lock = await database.db.transaction();
  await lock.raw('SELECT id FROM posts WHERE id = ? FOR UPDATE', [lockedPost]);
  const inFlight = voters.map((token) =>
    vote(base, token, lockedPost, 1, 60_000).then((a) => ({
      ...a,
      at: Date.now(),
    })),
  );
  const { value: waiting } = await pollUntil(
    () =>
      countOf(
        database.db,
        "pg_stat_activity WHERE application_name = 'social-posts' AND wait_event_type = 'Lock'",
      ),
    (n) => n >= IN_FLIGHT,
    { withinMs: 10_000, everyMs: 100 },
  );
  return { lock, inFlight, waiting };
}

test('When the service gets SIGTERM under load, then in-flight requests complete, readiness turns 503 first, it exits 0 within the grace and no request fails before the listener closes', async () => {
  // Slow in-flight calls wait on a row lock for longer than the shutdown delay; the statement
  // time-out is raised so that it, not the lock, is not what ends them.
  const svc: ServiceProcess = await startService({
    DB_NAME: database.name,
    SHUTDOWN_DELAY_SECONDS: String(DELAY_S),
    SHUTDOWN_TIMEOUT_SECONDS: String(TIMEOUT_S),
    DB_STATEMENT_TIMEOUT_MS: '30000',
  });
  const { token: writer, posts } = await author(svc.base, 'author@example.com', 40);
  const voters = await Promise.all(
    Array.from({ length: IN_FLIGHT }, (_, i) => account(svc.base, `late${i}@example.com`)),
  );
  const lockedPost = posts[0] as number;
  const authHeader = { authorization: `Bearer ${writer}` };

  const readiness = pollReadiness(svc.base);
  const { lists, votes } = steadyLoad(svc.base, posts, authHeader);
  const loadStartedAt = Date.now();
  await sleep(3000);

  const { lock, inFlight, waiting } = await heldInFlight(svc.base, voters, lockedPost);
  expect(waiting).toBe(IN_FLIGHT);

  const sigtermAt = Date.now();
  svc.child.kill('SIGTERM');
  const closing = await svc.waitForLog(/closing the listener/, 60_000);
  // pino's own timestamp: taken before the listener closes, on this machine's clock.
  const closeAt = Date.parse(String(closing.time));
  await sleep(1000);
  await lock.rollback();
  const answered = await Promise.all(inFlight);
  await sleep(300);
  const [listResult, voteResult] = await Promise.all([lists.stop(), votes.stop()]);
  const exitCode = await svc.exited;
  const exitedAfterMs = Date.now() - sigtermAt;
  await readiness.stop();

  const { probes } = readiness;
  const first503 = probes.find((p) => p.status === 503);
  const failuresBeforeClose = [...lists.errors, ...votes.errors].filter((e) => e.at < closeAt);
  const errorsAfterClose = lists.errors.length + votes.errors.length - failuresBeforeClose.length;
  const servedDuringDelay = [...lists.responses, ...votes.responses].filter(
    (at) => at > sigtermAt && at < closeAt,
  ).length;
  const votesOnLocked = await countOf(database.db, 'votes WHERE post_id = ?', [lockedPost]);

  report('graceful shutdown', {
    rpsBeforeSignal: Math.round(
      [...lists.responses, ...votes.responses].filter((at) => at < sigtermAt).length /
        ((sigtermAt - loadStartedAt) / 1000),
    ),
    listP99Ms: listResult.latency.p99,
    voteP99Ms: voteResult.latency.p99,
    requests: lists.responses.length + votes.responses.length,
    servedDuringDelay,
    failuresBeforeClose: failuresBeforeClose.length,
    unexpectedStatuses: lists.unexpected.length + votes.unexpected.length,
    errorsAfterClose,
    inFlight: answered.map((a) => a.status).join(','),
    readyTurned503AfterMs: first503 ? first503.at - sigtermAt : 'never',
    listenerClosedAfterMs: closeAt - sigtermAt,
    exitCode,
    exitedAfterMs,
    graceMs: (DELAY_S + TIMEOUT_S) * 1000,
  });

  expect(failuresBeforeClose).toEqual([]);
  expect([...lists.unexpected, ...votes.unexpected]).toEqual([]);
  expect(servedDuringDelay).toBeGreaterThan(0);
  for (const a of answered) {
    expect(a.status).toBe(201);
    expect(a.body).toEqual({ message: 'successfully added vote' });
    // Answered after the listener closed: they really were in flight across it.
    expect(a.at).toBeGreaterThan(closeAt);
  }
  expect(votesOnLocked).toBe(IN_FLIGHT);
  expect(probes.filter((p) => p.at < sigtermAt).every((p) => p.status === 200)).toBe(true);
  expect(first503).toBeDefined();
  expect(first503?.at ?? Infinity).toBeLessThan(closeAt);
  // Once 503, readiness never says 200 again.
  expect(probes.filter((p) => first503 && p.sentAt > first503.at && p.status === 200)).toEqual([]);
  expect(exitCode).toBe(0);
  expect(exitedAfterMs).toBeLessThan((DELAY_S + TIMEOUT_S) * 1000);
});
