import { serviceEnv } from '../../tools/harness/env';
import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { startService, stopAll } from '../../tools/harness/service';
import { account, call, report, sleep, statusCounts } from './support';

/**
 * The wall clock of the API process stepped back (an NTP step, a VM resumed) while the standby the
 * anonymous feed could be read from has replay paused: the bound on staleness is kept by the
 * monotonic clock, so no page past DB_READ_MAX_LAG_MS lacks a write acknowledged before it.
 */
const MAX_LAG_MS = 1000;
const STEP_MS = 30_000;
/** Loaded before the service: on SIGUSR2, Date.now goes STEP_MS back, as the system clock would. */
const STEP_BACK_ON_SIGUSR2 = `const wall = Date.now; let back = 0; process.on('SIGUSR2', () => { back = ${String(STEP_MS)}; }); Date.now = () => wall() - back;`;

const cluster = new ReplicatedPostgres({ standbys: 1 });
beforeAll(() => cluster.init());
afterAll(async () => {
  await stopAll();
  cluster.destroy();
});

test('When the wall clock steps back while replay is paused on the standby, then no anonymous page read past the bound lacks a write acknowledged before it', async () => {
  await cluster.query(cluster.primaryPort, 'CREATE DATABASE sp_standby_clock');
  const env = serviceEnv(
    {
      PORT: '0',
      LOG_LEVEL: 'info',
      DB_HOSTNAME: '127.0.0.1',
      DB_PORT: String(cluster.primaryPort),
      DB_NAME: 'sp_standby_clock',
      DB_READ_HOSTNAME: `127.0.0.1:${String(cluster.standbyPort)}`,
      DB_READ_MAX_LAG_MS: String(MAX_LAG_MS),
    },
    'postgres',
  );
  const api = await startService(env, {
    nodeArgs: ['--import', `data:text/javascript,${encodeURIComponent(STEP_BACK_ON_SIGUSR2)}`],
  });
  const token = await account(api.base, 'clock@example.com');
  await sleep(1500);
  await cluster.pauseReplay(cluster.standbyPort);
  try {
    const fresh = await call(api.base, '/posts/', { token, json: { title: 'fresh', content: 'c' } });
    expect(fresh.status).toBe(201);
    const freshId = (fresh.body as { id: number }).id;
    await sleep(MAX_LAG_MS + 1000);
    process.kill(api.pid, 'SIGUSR2');
    await sleep(300);
    const pages: { status: number; hasFresh: boolean }[] = [];
    for (let i = 0; i < 10; i++) {
      const page = await call(api.base, '/posts/public?limit=100');
      const ids = page.status === 200 ? (page.body as { id: number }[]).map((p) => p.id) : [];
      pages.push({ status: page.status, hasFresh: ids.includes(freshId) });
      await sleep(300);
    }
    const stale = pages.filter((p) => p.status === 200 && !p.hasFresh);
    report('standby reads clock stepped back', {
      pages: statusCounts(pages),
      staleBeyondBound: stale.length,
    });
    expect(stale).toEqual([]);
    expect(pages.every((p) => p.status === 200)).toBe(true);
  } finally {
    await cluster.resumeReplay(cluster.standbyPort);
  }
}, 120_000);
