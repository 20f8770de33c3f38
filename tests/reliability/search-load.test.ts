/**
 * Anonymous searches no index can serve (`%%%%`, `zz`, `q`, `_`) are each a scan of the whole
 * table; unbounded, a handful of clients would fill the pool, the cheap feed would wait and
 * readiness, on the same pool, would answer 503 on every replica at once. So they run a few at a
 * time per process, the excess is refused at once, and readiness asks on a connection of its own.
 */
import { seed } from '../../tools/harness/seed';
import {
  call,
  isProblem,
  p50,
  report,
  sleep,
  startService,
  statusCounts,
  whileRunning,
  type Answer,
} from './support';
import { stopAll } from '../../tools/harness/service';

/** Enough posts that a search without a match costs a walk of real length; seeded once, then reused. */
const POSTS = Number(process.env.SEARCH_LOAD_POSTS ?? 20_000);
const CLIENTS = 20;
const ATTACK_MS = 8000;
/** A small pool, as a replica's share of a busy database is: the attack could fill it on its own. */
const POOL_MAX = 4;
/** Each client's pause between its searches: ~40 requests a second in all, a trickle. */
const CLIENT_PAUSE_MS = 500;
const UNINDEXED = ['%25%25%25%25', 'zz', 'q', '_', 'xq', '%25'];

afterAll(() => stopAll());

/**
 * `CLIENTS` clients sending searches no index serves for `ATTACK_MS`, while the feed and readiness
 * are asked on the side: every answer of each, and what failed outright.
 */
async function underAttack(base: string) {
  const searches: Answer[] = [];
  const feedDuring: Answer[] = [];
  const readyDuring: Answer[] = [];
  /** Asks `path` into `into`, then pauses `everyMs`. */
  const asking = (into: Answer[], path: (i: number) => string, everyMs: number) => async (i: number) => {
    into.push(await call(base, path(i), { timeoutMs: 10_000 }));
    await sleep(everyMs);
  };
  const failures = await whileRunning(ATTACK_MS, [
    ...Array.from({ length: CLIENTS }, (_, n) =>
      asking(
        searches,
        (i) => `/posts/public?search=${UNINDEXED[(n + i) % UNINDEXED.length] ?? 'q'}&limit=100`,
        CLIENT_PAUSE_MS,
      ),
    ),
    asking(feedDuring, () => '/posts/public?limit=10', 50),
    asking(readyDuring, () => '/healthz/ready', 250),
  ]);
  return { searches, feedDuring, readyDuring, failures };
}

test('When 20 anonymous clients keep sending searches no index serves, then the excess is 503 with Retry-After at once, the feed stays quick and readiness stays 200', async () => {
  const seeded = await seed(POSTS, false, (line) => process.stdout.write(`${line}\n`));
  const svc = await startService({
    DB_NAME: seeded.database,
    DB_POOL_MAX: String(POOL_MAX),
    // One at a time leaves the second core of a CI machine to everything else.
    SEARCH_UNINDEXED_CONCURRENCY: '1',
  });

  const feed = async (): Promise<Answer> => call(svc.base, '/posts/public?limit=10', { timeoutMs: 10_000 });
  // Warm the statements and connections (the probe's own too, as a kubelet's probing keeps it),
  // then the quiet figure.
  for (let i = 0; i < 5; i += 1) {
    await feed();
    await call(svc.base, '/healthz/ready');
  }
  const quiet: number[] = [];
  for (let i = 0; i < 15; i += 1) quiet.push((await feed()).ms);

  const { searches, feedDuring, readyDuring, failures } = await underAttack(svc.base);

  const served = searches.filter((a) => a.status === 200);
  const shed = searches.filter((a) => a.status === 503);
  report('unindexed searches', {
    posts: POSTS,
    clients: CLIENTS,
    searchStatuses: statusCounts(searches),
    servedP50Ms: Math.round(p50(served.map((a) => a.ms))),
    shedP50Ms: Math.round(p50(shed.map((a) => a.ms))),
    feedQuietP50Ms: Math.round(p50(quiet)),
    feedDuringP50Ms: Math.round(p50(feedDuring.map((a) => a.ms))),
    feedStatuses: statusCounts(feedDuring),
    readyStatuses: statusCounts(readyDuring),
    readySlowestMs: Math.round(Math.max(...readyDuring.map((a) => a.ms))),
    failures: failures.length,
  });

  expect(failures).toEqual([]);
  // Searches are answered (the substring rule holds) or refused at once, nothing else.
  expect(served.length).toBeGreaterThan(0);
  expect(shed.length).toBeGreaterThan(0);
  for (const a of searches) expect([200, 503]).toContain(a.status);
  for (const a of shed) {
    expect({ problem: isProblem(a), retryAfter: a.retryAfter }).toEqual({ problem: true, retryAfter: '1' });
    expect((a.body as { detail: string }).detail).toMatch(/Too many searches/);
  }
  // Refused at once: not queued behind the running ones.
  expect(p50(shed.map((a) => a.ms))).toBeLessThan(250);
  // The cheap feed keeps answering quickly (against its own quiet figure, as CI machines differ),
  // and readiness never takes the replica out.
  expect(feedDuring.length).toBeGreaterThan(10);
  for (const a of feedDuring) expect(a.status).toBe(200);
  expect(p50(feedDuring.map((a) => a.ms))).toBeLessThan(Math.max(250, 4 * p50(quiet)));
  expect(readyDuring.length).toBeGreaterThan(5);
  for (const a of readyDuring) expect(a.status).toBe(200);
});
