import { Relay } from '../../tools/harness/relay';
import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { call, isProblem, report, startService, stopAllServices, type ServiceProcess } from './support';

/**
 * The DB_READ_HOSTNAME entries (one: a pooler or Service in front of the standbys, the chart's way;
 * or two) vanish from the network mid-traffic: nothing they hold answers, nothing is closed (relays
 * stalled, as lost nodes). The primary can answer every anonymous read: none may be a 503.
 */
const STATEMENT_TIMEOUT_MS = 1500;
const READERS = 4;
const STALLED_MS = 4000;

const cluster = new ReplicatedPostgres({ standbys: 1 });
const relays: Relay[] = [];

beforeAll(async () => {
  await cluster.init();
});

afterAll(async () => {
  await stopAllServices();
  await Promise.all(relays.map((relay) => relay.close()));
  cluster.destroy();
});

/** Anonymous reads of the feed by `READERS` loops for `ms`: each answer's status and time. */
async function anonymousReads(api: ServiceProcess, ms: number) {
  const answers: { status: number; problem: boolean; ms: number }[] = [];
  const until = Date.now() + ms;
  await Promise.all(
    Array.from({ length: READERS }, async () => {
      while (Date.now() < until) {
        const sent = performance.now();
        const answer = await call(api.base, '/posts/public?limit=5');
        answers.push({
          status: answer.status,
          problem: isProblem(answer),
          ms: Math.round(performance.now() - sent),
        });
      }
    }),
  );
  return answers;
}

test.each([
  ['the only standby endpoint stalls', 1],
  // Each takes half of what is left: the second's share and the primary's read must still fit.
  ['both standby endpoints stall', 2],
])(
  'When %s under anonymous reads, then each read is answered by the primary within the request budget, none with a 503',
  async (_label, endpoints) => {
    const stalling = Array.from({ length: endpoints }, () => new Relay(cluster.standbyPort));
    relays.push(...stalling);
    await Promise.all(stalling.map((relay) => relay.start()));
    const api = await startService({
      DB_HOSTNAME: '127.0.0.1',
      DB_PORT: String(cluster.primaryPort),
      DB_NAME: 'postgres',
      DB_READ_HOSTNAME: stalling.map((relay) => `127.0.0.1:${String(relay.port)}`).join(','),
      DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    });
    const warm = await anonymousReads(api, 1500);
    expect(warm.filter((a) => a.status !== 200)).toEqual([]);
    const metrics = await (await fetch(`http://127.0.0.1:${String(api.metricsPort)}/metrics`)).text();
    expect(metrics).toMatch(/db_reads_total\{target="standby"\} [1-9]/);

    for (const relay of stalling) relay.stall();
    const stalled = await anonymousReads(api, STALLED_MS);
    const failed = stalled.filter((a) => a.status !== 200);
    report(`standby-stall, ${String(endpoints)} endpoint(s)`, {
      reads: stalled.length,
      failed: failed.length,
      slowestMs: Math.max(...stalled.map((a) => a.ms)),
    });
    expect(stalled.length).toBeGreaterThan(READERS);
    expect(failed).toEqual([]);
    // The budget, a cancel's grace, and slack.
    expect(Math.max(...stalled.map((a) => a.ms))).toBeLessThan(STATEMENT_TIMEOUT_MS + 500 + 1000);
    await api.stop();
  },
);
