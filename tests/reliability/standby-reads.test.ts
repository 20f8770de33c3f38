import { OwnPgBouncer } from '../../tools/harness/pgbouncer';
import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { sample } from '../../tools/harness/metrics-text';
import {
  account,
  call,
  report,
  sleep,
  startService,
  statusCounts,
  stopAllServices,
  type ServiceProcess,
} from './support';

/**
 * Reads on standbys with real parts: a primary and two streaming standbys, two API processes
 * reading the public feed on the standbys (DB_READ_HOSTNAME), directly and through PgBouncer 1.24
 * in transaction mode (one pooler per server, as CloudNativePG's rw and ro Poolers stand in front
 * of their Services). Replay is paused on one standby while writers and anonymous readers run:
 * - every write is read back at once by its writer through the other process (their token sends the
 *   read to the primary): no read-your-writes violation in at least 5,000 pairs;
 * - most anonymous reads of the feed run on the standbys, counted on each server with
 *   pg_stat_statements, and none is staler than DB_READ_MAX_LAG_MS;
 * - the paused standby gets no read once its lag is past the bound (and a probe has seen it).
 * The faults (a standby lost, replay paused, the primary failing over) are standby-faults.test.ts's.
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

interface Acknowledged {
  at: number;
  createdAt: number;
}

interface Traffic {
  pairs: number;
  violations: { id: number; status: number }[];
  readBackStatuses: { status: number }[];
  writeStatuses: { status: number }[];
  anonymous: { status: number; ms: number }[];
  /** Anonymous pages missing a post acknowledged more than MAX_LAG_MS before they were asked for. */
  stale: number;
  stop(): Promise<void>;
  done: Promise<void>;
}

/**
 * Writers post through one process and read the post back with their token through the other, in
 * turn; anonymous readers read the feed's first page through either. Runs until `pairs` pairs are
 * done or stop() is called.
 */
function traffic(apis: ServiceProcess[], tokens: string[], pairs: number): Traffic {
  const acknowledged: Acknowledged[] = [];
  let stopped = false;
  const state: Omit<Traffic, 'stop' | 'done'> = {
    pairs: 0,
    violations: [],
    readBackStatuses: [],
    writeStatuses: [],
    anonymous: [],
    stale: 0,
  };
  const api = (i: number): ServiceProcess => {
    const chosen = apis[i % apis.length];
    if (!chosen) throw new Error('no API process');
    return chosen;
  };
  const writer = async (w: number, token: string): Promise<void> => {
    for (let i = 0; !stopped && state.pairs < pairs; i++) {
      // A word of its own that the title index serves (no other title holds it).
      const title = `rw${String(w)}n${String(i)}q`;
      const created = await call(api(w + i).base, '/posts/', { token, json: { title, content: 'c' } });
      state.writeStatuses.push(created);
      if (created.status !== 201) continue;
      const post = created.body as { id: number; created_at: string };
      acknowledged.push({ at: Date.now(), createdAt: Date.parse(post.created_at) });
      const read = await call(api(w + i + 1).base, `/posts/public?search=${encodeURIComponent(title)}`, {
        token,
      });
      state.pairs++;
      state.readBackStatuses.push(read);
      const found = read.status === 200 && (read.body as { id: number }[]).some((p) => p.id === post.id);
      if (!found) state.violations.push({ id: post.id, status: read.status });
    }
  };
  const reader = async (r: number): Promise<void> => {
    for (let i = 0; !stopped && state.pairs < pairs; i++) {
      const sentAt = Date.now();
      // The newest post acknowledged longer than the bound ago: the page must be at least as new.
      let due: Acknowledged | undefined;
      for (const a of acknowledged)
        if (a.at <= sentAt - MAX_LAG_MS && a.createdAt > (due?.createdAt ?? 0)) due = a;
      const page = await call(api(r + i).base, `/posts/public?limit=${String(PAGE)}`);
      state.anonymous.push(page);
      const newest = page.status === 200 ? (page.body as { created_at: string }[])[0] : undefined;
      if (due && newest && Date.parse(newest.created_at) < due.createdAt) state.stale++;
    }
  };
  const done = Promise.all([
    ...tokens.map((token, w) => writer(w, token)),
    ...Array.from({ length: READERS }, (_, r) => reader(r)),
  ]).then(() => undefined);
  return Object.assign(state, {
    done,
    stop: async () => {
      stopped = true;
      await done;
    },
  });
}

/** What a process's metrics say of its reads. */
async function readsOf(svc: ServiceProcess): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${String(svc.metricsPort)}/metrics`)).text();
  return {
    primary: sample(text, 'db_reads_total', 'target="primary"') ?? 0,
    standby: sample(text, 'db_reads_total', 'target="standby"') ?? 0,
    lagging: sample(text, 'db_read_fallbacks_total', 'reason="lagging"') ?? 0,
    error: sample(text, 'db_read_fallbacks_total', 'reason="error"') ?? 0,
  };
}

/** The two processes on `database`, their primary and standby endpoints as given. */
async function apisOn(
  database: string,
  primary: number,
  standbys: number[],
  extra: Record<string, string> = {},
): Promise<ServiceProcess[]> {
  const env = {
    DB_HOSTNAME: '127.0.0.1',
    DB_PORT: String(primary),
    DB_NAME: database,
    DB_READ_HOSTNAME: standbys.map((port) => `127.0.0.1:${String(port)}`).join(','),
    DB_READ_MAX_LAG_MS: String(MAX_LAG_MS),
    DB_STATEMENT_TIMEOUT_MS: '1500',
    BCRYPT_ROUNDS: '4',
    ...extra,
  };
  const first = await startService(env);
  // The second once the first has migrated: they would only queue on the migration lock.
  return [first, await startService(env)];
}

/** The steady case on the given endpoints: replay paused on the first standby. */
async function steadyCase(label: string, apis: ServiceProcess[], database: string): Promise<void> {
  const first = apis[0];
  if (!first) throw new Error('no API process');
  const tokens: string[] = [];
  for (let w = 0; w < WRITERS; w++)
    tokens.push(await account(first.base, `${label}-writer${String(w)}@example.com`));
  // A full first page before the counting starts, so every page read is PAGE rows.
  for (let i = 0; i < PAGE; i++)
    await call(first.base, '/posts/', {
      token: tokens[0],
      json: { title: `seed ${String(i)}`, content: 'c' },
    });
  await sleep(500);
  await resetStatements();
  const [paused, running] = cluster.standbyPorts as [number, number];
  await cluster.pauseReplay(paused);
  const pausedAt = Date.now();
  const load = traffic(apis, tokens, PAIRS);
  await sleep(SKIPPED_WITHIN_MS);
  const pausedAtBound = await feedStatements(paused, database, true);
  // Progress on a loaded machine, and a cap: fewer pairs than asked then fail the case below.
  const progress = setInterval(() => {
    report(`standby reads ${label} progress`, { pairs: load.pairs, anonymousReads: load.anonymous.length });
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
  report(`standby reads ${label}`, {
    pairs: load.pairs,
    violations: load.violations.length,
    readBacks: statusCounts(load.readBackStatuses),
    writes: statusCounts(load.writeStatuses),
    anonymousReads: statusCounts(load.anonymous),
    slowestAnonymousMs: Math.round(Math.max(...load.anonymous.map((a) => a.ms))),
    staleBeyondBound: load.stale,
    servedOnStandbys: Math.round(served),
    onPrimary: onPrimary.calls,
    shareOnStandbys: share.toFixed(3),
    pausedStandbyCallsAfterBound: pausedAtEnd.calls - pausedAtBound.calls,
    pausedForMs: Date.now() - pausedAt,
    processMetrics: metrics,
  });

  expect(load.pairs).toBeGreaterThanOrEqual(PAIRS);
  expect(load.violations).toEqual([]);
  expect(load.readBackStatuses.every((a) => a.status === 200)).toBe(true);
  expect(load.writeStatuses.every((a) => a.status === 201)).toBe(true);
  expect(load.anonymous.every((a) => a.status === 200)).toBe(true);
  expect(load.stale).toBe(0);
  expect(share).toBeGreaterThanOrEqual(0.9);
  // Past its bound the paused standby is not read from at all.
  expect(pausedAtEnd.calls - pausedAtBound.calls).toBe(0);
  expect(pausedAtBound.calls).toBeGreaterThan(0);
}

describe('Reads on standbys', () => {
  test(
    `When replay is paused on one of two standbys under mixed traffic through two processes, then ${String(PAIRS)} writes are each read back at once, at least 90 % of anonymous feed reads run on standbys, none staler than the bound, and the paused one is skipped past it (direct)`,
    async () => {
      const database = await caseDatabase('direct');
      const apis = await apisOn(database, cluster.primaryPort, cluster.standbyPorts);
      try {
        await steadyCase('direct', apis, database);
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
        const apis = await apisOn(database, primary, standbys);
        await steadyCase('pgbouncer', apis, database);
      } finally {
        await stopAllServices();
        for (const bouncer of bouncers) await bouncer.destroy();
      }
    },
    CASE_TIMEOUT_MS,
  );
});
