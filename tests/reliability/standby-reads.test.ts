import { OwnPgBouncer } from '../../tools/harness/pgbouncer';
import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { sample, scrape } from '../../tools/harness/metrics-text';
import {
  account,
  call,
  connect,
  isProblem,
  readBackTraffic,
  readingApis,
  report,
  sleep,
  startOn,
  statusCounts,
  stopAllServices,
  untilStopped,
  vote,
  type ServiceProcess,
} from './support';

/**
 * Reads on standbys with real parts: a primary, two streaming standbys (DB_READ_HOSTNAME) and two API
 * processes, directly and through PgBouncer in transaction mode as CloudNativePG's Poolers run. With
 * replay paused on one standby: every write is read back at once by its writer through the other
 * process (their token reads the primary); most anonymous reads run on the standbys, none staler
 * than DB_READ_MAX_LAG_MS; the paused standby gets none once a probe has seen its lag past the bound.
 * And with one process's whole pool, or the server connections of the pooler in front of the
 * primary, held by requests waiting on a lock: its anonymous reads are still no staler than the bound. The faults are standby-faults.test.ts's.
 */
const MAX_LAG_MS = 1000;
const PAIRS = 5000;
const WRITERS = 8;
const READERS = 4;
const PAGE = 10;
/** A probe sees a standby's lag every 0.25 s: past the bound and one probe, it is skipped. */
const SKIPPED_WITHIN_MS = MAX_LAG_MS + 1000;
/** The longest the traffic runs; a case that has not done PAIRS pairs by then fails. */
const LOAD_CAP_MS = 150_000;
/** Each case: the cluster's traffic, two processes started and migrated, the load capped as above. */
const CASE_TIMEOUT_MS = 300_000;

const cluster = new ReplicatedPostgres({
  standbys: 2,
  settings: { shared_preload_libraries: 'pg_stat_statements' },
});
beforeAll(async () => {
  await cluster.init();
  await cluster.query(cluster.primaryPort, 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
});
afterAll(async () => {
  await stopAllServices();
  cluster.destroy();
});

/** A database of the case's own on the cluster; the standbys replay its creation. */
async function caseDatabase(label: string): Promise<string> {
  const name = `sp_standby_reads_${label}`;
  await cluster.query(cluster.primaryPort, `CREATE DATABASE ${name}`);
  return name;
}

interface Counted {
  calls: number;
  rows: number;
}

/**
 * The anonymous feed's first pages as each server ran them: on a standby its guarded form (the
 * standby_fresh check around the page), on the primary the page itself. Searches and signed-in
 * lists differ in their text and are left out.
 */
async function feedStatements(port: number, database: string, guarded: boolean): Promise<Counted> {
  const rows = await cluster.query<{ calls: string | null; rows: string | null }>(
    port,
    `SELECT sum(s.calls) AS calls, sum(s.rows) AS rows
       FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = $1 AND s.query LIKE '%"page"%' AND s.query NOT LIKE '%viewer%'
        AND s.query NOT LIKE '%fold_case%' AND (s.query LIKE '%standby_fresh%') = $2`,
    [database, guarded],
  );
  return { calls: Number(rows[0]?.calls ?? 0), rows: Number(rows[0]?.rows ?? 0) };
}

async function resetStatements(): Promise<void> {
  for (const port of [cluster.primaryPort, ...cluster.standbyPorts])
    await cluster.query(port, 'SELECT pg_stat_statements_reset()');
}

/** What a process's metrics say of its reads. */
async function readsOf(svc: ServiceProcess): Promise<Record<string, number>> {
  const text = await scrape(svc.metricsPort);
  return {
    primary: sample(text, 'db_reads_total', 'target="primary"') ?? 0,
    standby: sample(text, 'db_reads_total', 'target="standby"') ?? 0,
    lagging: sample(text, 'db_read_fallbacks_total', 'reason="lagging"') ?? 0,
    error: sample(text, 'db_read_fallbacks_total', 'reason="error"') ?? 0,
  };
}

/** The steady case on `database` through the given endpoints: replay paused on the first standby. */
async function steadyCase(
  label: string,
  database: string,
  primary: number,
  standbys: number[],
): Promise<void> {
  // With a full first page before the counting starts, every page read is PAGE rows.
  const { apis, tokens } = await readingApis({
    primary,
    standbys,
    database,
    maxLagMs: MAX_LAG_MS,
    statementTimeoutMs: 1500,
    label,
    writers: WRITERS,
    page: PAGE,
  });
  await sleep(500);
  await resetStatements();
  const [paused, running] = cluster.standbyPorts as [number, number];
  await cluster.pauseReplay(paused);
  const pausedAt = Date.now();
  const load = readBackTraffic(apis, tokens, { readers: READERS, page: PAGE, pairs: PAIRS });
  await sleep(SKIPPED_WITHIN_MS);
  const pausedAtBound = await feedStatements(paused, database, true);
  // Progress on a loaded machine, and a cap: fewer pairs than asked then fail the case below.
  const progress = setInterval(() => {
    report(`standby reads ${label} progress`, { pairs: load.readBacks(), answers: load.answers.length });
  }, 10_000);
  const cap = setTimeout(() => void load.stop(), LOAD_CAP_MS);
  await load.done;
  clearInterval(progress);
  clearTimeout(cap);
  const pausedAtEnd = await feedStatements(paused, database, true);
  await cluster.resumeReplay(paused);

  const onStandbys = [
    await feedStatements(paused, database, true),
    await feedStatements(running, database, true),
  ];
  const onPrimary = await feedStatements(cluster.primaryPort, database, false);
  // A read the check turned away returns one row, a served one PAGE rows: the misses, exactly.
  const served = onStandbys.reduce(
    (sum, c) => sum + (c.rows - (c.calls * PAGE - c.rows) / (PAGE - 1)) / PAGE,
    0,
  );
  const share = served / (served + onPrimary.calls);
  const metrics = await Promise.all(apis.map(readsOf));
  const [writes, readBacks, anonymous] = [load.of('write'), load.of('read-back'), load.of('anonymous')];
  // No read-your-writes violation: each writer's read-back found their post.
  const violations = readBacks.filter((a) => a.found !== true);
  // Pages missing a post acknowledged more than MAX_LAG_MS before they were asked for.
  const stale = anonymous.filter(
    (a) =>
      a.newest !== undefined &&
      writes.some((w) => w.at <= a.sentAt - MAX_LAG_MS && (w.createdAt ?? 0) > (a.newest ?? 0)),
  ).length;
  report(`standby reads ${label}`, {
    pairs: readBacks.length,
    violations: violations.length,
    readBacks: statusCounts(readBacks),
    writes: statusCounts(writes),
    anonymousReads: statusCounts(anonymous),
    slowestAnonymousMs: Math.round(Math.max(...anonymous.map((a) => a.ms))),
    staleBeyondBound: stale,
    servedOnStandbys: Math.round(served),
    onPrimary: onPrimary.calls,
    shareOnStandbys: share.toFixed(3),
    pausedStandbyCallsAfterBound: pausedAtEnd.calls - pausedAtBound.calls,
    pausedForMs: Date.now() - pausedAt,
    processMetrics: metrics,
  });

  expect(load.failures).toEqual([]);
  expect(readBacks.length).toBeGreaterThanOrEqual(PAIRS);
  expect(violations).toEqual([]);
  expect(readBacks.every((a) => a.status === 200)).toBe(true);
  expect(writes.every((a) => a.status === 201)).toBe(true);
  expect(anonymous.every((a) => a.status === 200)).toBe(true);
  expect(stale).toBe(0);
  expect(share).toBeGreaterThanOrEqual(0.9);
  // Past its bound the paused standby is not read from at all.
  expect(pausedAtEnd.calls - pausedAtBound.calls).toBe(0);
  expect(pausedAtBound.calls).toBeGreaterThan(0);
}

/** What a process needs to read the anonymous feed on both standbys within the bound. */
const readEnv = () => ({
  DB_READ_HOSTNAME: cluster.standbyPorts.map((port) => `127.0.0.1:${String(port)}`).join(','),
  DB_READ_MAX_LAG_MS: String(MAX_LAG_MS),
});

/**
 * Four votes from `holder` wait on a lock on votes, holding the primary's connections `busy` reads
 * through (its pool, or its pooler's); replay is paused on both standbys, another process, straight
 * to the primary, acknowledges a post, and three readers read `busy`'s anonymous feed for `readMs`:
 * each page past the bound has that post, or is a 503 problem, and some are (the connections were held).
 */
async function feedWhilePrimaryHeld(
  label: string,
  database: string,
  holder: ServiceProcess,
  busy: ServiceProcess,
  readMs: number,
): Promise<void> {
  const writer = await startOn(cluster.primaryPort, database);
  const token = await account(writer.base, `${database}@example.com`);
  const seed = await call(writer.base, '/posts/', { token, json: { title: 'seed', content: 'c' } });
  const seedId = (seed.body as { id: number }).id;
  const admin = connect(database, cluster.primaryPort);
  const lock = await admin.transaction();
  await lock.raw('LOCK TABLE votes IN SHARE MODE');
  const holders = untilStopped(
    Array.from({ length: 4 }, () => async () => {
      await vote(holder.base, token, seedId, 1, 30_000);
    }),
  );
  const pages: { sentAt: number; status: number; problem: boolean; hasFresh: boolean }[] = [];
  let acknowledgedAt = 0;
  try {
    await sleep(4000);
    for (const port of cluster.standbyPorts) await cluster.pauseReplay(port);
    const fresh = await call(writer.base, '/posts/', { token, json: { title: 'fresh', content: 'c' } });
    expect(fresh.status).toBe(201);
    acknowledgedAt = Date.now();
    const freshId = (fresh.body as { id: number }).id;
    const reader = async () => {
      while (Date.now() < acknowledgedAt + readMs) {
        const sentAt = Date.now();
        const page = await call(busy.base, '/posts/public?limit=100', { timeoutMs: 15_000 });
        const posts = page.status === 200 ? (page.body as { id: number }[]) : [];
        pages.push({
          sentAt,
          status: page.status,
          problem: isProblem(page),
          hasFresh: posts.some((p) => p.id === freshId),
        });
        await sleep(150);
      }
    };
    await Promise.all([reader(), reader(), reader()]);
  } finally {
    await lock.rollback();
    await holders.stop();
    await admin.destroy();
    for (const port of cluster.standbyPorts) await cluster.resumeReplay(port);
  }
  const pastBound = pages.filter((p) => p.sentAt >= acknowledgedAt + MAX_LAG_MS);
  const stale = pastBound.filter((p) => p.status === 200 && !p.hasFresh);
  report(label, {
    pagesPastBound: statusCounts(pastBound),
    staleBeyondBound: stale.length,
    holderFailures: holders.failures.length,
  });
  expect(holders.failures).toEqual([]);
  expect(pastBound.length).toBeGreaterThan(0);
  expect(stale).toEqual([]);
  expect(pastBound.every((p) => p.status === 200 || (p.status === 503 && p.problem))).toBe(true);
  // The connections were in fact held: the reads the standbys could not serve waited for them in vain.
  expect(pastBound.some((p) => p.status === 503)).toBe(true);
}

describe('Reads on standbys', () => {
  test(
    `When replay is paused on one of two standbys under mixed traffic through two processes, then ${String(PAIRS)} writes are each read back at once, at least 90 % of anonymous feed reads run on standbys, none staler than the bound, and the paused one is skipped past it (direct)`,
    async () => {
      const database = await caseDatabase('direct');
      try {
        await steadyCase('direct', database, cluster.primaryPort, cluster.standbyPorts);
      } finally {
        await stopAllServices();
      }
    },
    CASE_TIMEOUT_MS,
  );

  test(
    `When the same runs behind PgBouncer 1.24 in transaction mode, one pooler per server, then the same holds`,
    async () => {
      const database = await caseDatabase('pgbouncer');
      const bouncers = [cluster.primaryPort, ...cluster.standbyPorts].map(
        (port) => new OwnPgBouncer({ version: '1.24', target: { host: '127.0.0.1', port }, poolSize: 4 }),
      );
      try {
        for (const bouncer of bouncers) await bouncer.start();
        const [primary, ...standbys] = bouncers.map((b) => b.port) as [number, ...number[]];
        await steadyCase('pgbouncer', database, primary, standbys);
      } finally {
        await stopAllServices();
        for (const bouncer of bouncers) await bouncer.destroy();
      }
    },
    CASE_TIMEOUT_MS,
  );

  test(
    "When a process's own pool is held by requests waiting on a lock, then its anonymous feed is still never staler than the bound: a page with every post acknowledged before it, or a 503",
    async () => {
      const database = await caseDatabase('busy_pool');
      try {
        // Statements may wait far longer than a pooled connection is: two held votes keep its pool.
        const busy = await startOn(cluster.primaryPort, database, {
          ...readEnv(),
          DB_STATEMENT_TIMEOUT_MS: '20000',
          DB_POOL_MAX: '2',
        });
        // Longer than a wait for a pooled connection: a position read queued behind the votes would have given up.
        await feedWhilePrimaryHeld('standby reads busy pool', database, busy, busy, 8000);
      } finally {
        await stopAllServices();
      }
    },
    CASE_TIMEOUT_MS,
  );

  test(
    'When the pooler in front of the primary has every server connection held by requests waiting on a lock while writes go on through another, then a process behind it still serves no anonymous page staler than the bound: a page with every post acknowledged before it, or a 503',
    async () => {
      const database = await caseDatabase('busy_pooler');
      // One pooler instance of several: its two server connections are what the processes behind it share.
      const bouncer = new OwnPgBouncer({
        version: '1.24',
        target: { host: '127.0.0.1', port: cluster.primaryPort },
        poolSize: 2,
      });
      try {
        await bouncer.start();
        const holder = await startOn(bouncer.port, database, { DB_STATEMENT_TIMEOUT_MS: '20000' });
        const busy = await startOn(bouncer.port, database, readEnv());
        // Past a few reads of the primary's position, each queued in the pooler behind the votes.
        await feedWhilePrimaryHeld('standby reads busy pooler', database, holder, busy, 6000);
      } finally {
        await stopAllServices();
        await bouncer.destroy();
      }
    },
    CASE_TIMEOUT_MS,
  );
});
