import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { sample, scrape } from '../../tools/harness/metrics-text';
import { account, call, report, sleep, startOn, statusCounts, stopAllServices } from './support';

/**
 * A standby of DB_READ_HOSTNAME promoted while the primary at DB_HOSTNAME goes on taking writes (a
 * promotion without fencing the old primary): it has none of the writes acknowledged since, so no
 * anonymous feed page past DB_READ_MAX_LAG_MS may come from it, even once its own WAL runs past the
 * primary's position.
 */
const MAX_LAG_MS = 1000;

const cluster = new ReplicatedPostgres({ standbys: 2 });
beforeAll(() => cluster.init());
afterAll(async () => {
  await stopAllServices();
  cluster.destroy();
});

test('When the standby the anonymous feed is read from is promoted while writes go on on the primary, then no page read past the bound lacks a write acknowledged before it', async () => {
  await cluster.query(cluster.primaryPort, 'CREATE DATABASE sp_standby_promoted');
  // The asynchronous one: the primary's commits do not wait for it, before or after its promotion.
  const promoted = cluster.standbyPorts[1] ?? 0;
  const api = await startOn(cluster.primaryPort, 'sp_standby_promoted', {
    DB_READ_HOSTNAME: `127.0.0.1:${String(promoted)}`,
    DB_READ_MAX_LAG_MS: String(MAX_LAG_MS),
  });
  const token = await account(api.base, 'promoted@example.com');
  // Past a probe of the standby, so reads go there before the promotion.
  await sleep(1500);
  const before = await call(api.base, '/posts/public?limit=100');
  expect(before.status).toBe(200);
  await cluster.query(promoted, 'SELECT pg_promote()');
  // Writes of its own and a finished segment (as archive_timeout makes one) put its WAL position
  // past the primary's, on a history of its own: positions alone would call it fresh.
  await cluster.query(promoted, 'CREATE TABLE split_off (x int)');
  await cluster.query(promoted, 'SELECT pg_switch_wal()');
  const written: number[] = [];
  for (let i = 0; i < 5; i++) {
    const answer = await call(api.base, '/posts/', {
      token,
      json: { title: `after ${String(i)}`, content: 'c' },
    });
    expect(answer.status).toBe(201);
    written.push((answer.body as { id: number }).id);
    await sleep(300);
  }
  await sleep(MAX_LAG_MS + 500);
  const pages: { status: number; missing: number }[] = [];
  for (let i = 0; i < 10; i++) {
    const page = await call(api.base, '/posts/public?limit=100');
    const ids = page.status === 200 ? (page.body as { id: number }[]).map((p) => p.id) : [];
    pages.push({ status: page.status, missing: written.filter((id) => !ids.includes(id)).length });
    await sleep(200);
  }
  const metrics = await scrape(api.metricsPort);
  const stale = pages.filter((p) => p.status === 200 && p.missing > 0);
  report('standby promoted under writes', {
    pages: statusCounts(pages),
    staleBeyondBound: stale.length,
    readsOnStandby: sample(metrics, 'db_reads_total', 'target="standby"'),
    readsOnPrimary: sample(metrics, 'db_reads_total', 'target="primary"'),
  });
  expect(stale).toEqual([]);
  expect(pages.every((p) => p.status === 200)).toBe(true);
}, 120_000);
