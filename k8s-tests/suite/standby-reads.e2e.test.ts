/**
 * Reads on standbys through the ro Pooler (cnpg.reads): the local runner stands in for the rw and
 * the ro Pooler (PgBouncer 1.24.1 before the primary and before the standby) and gives the replicas
 * DB_READ_HOSTNAME; requests go through the proxy, so they land on every replica. Anonymous list
 * reads must run on the standby (counted by the replicas' own db_reads_total and by the standby's
 * committed transactions); with the standby's replay paused, a signed-in writer must read every
 * write of theirs at once (signed-in reads stay on the primary), and once the pause is older than
 * DB_READ_MAX_LAG_MS anonymous readers must see the newest write too (the lagging standby skipped,
 * db_read_fallbacks_total counting it). Only the local runner can pause a standby: elsewhere the
 * case is skipped.
 */
import { readFileSync } from 'node:fs';
import { sumOf } from '../../tools/harness/metrics-text';
import { pollUntil } from '../../tools/harness/poll';
import { closeConnections, fromAddress, postJson, run, send, signedIn } from './client';
import { driverFromEnv, type ReplicaMetrics } from './drivers';

const driver = driverFromEnv();
const renderedFile = process.env.K8S_RENDERED_FILE;
const standbyCase = driver.standby && driver.replicaMetrics && renderedFile ? test : test.skip;

/** Another loopback address than the other cases': the proxy's rate limit counts per client address. */
const CLIENT_ADDRESS = '127.0.0.4';
/** Anonymous reads per phase, and write-then-read pairs while the standby lags. */
const READS = 60;
const PAIRS = 30;

afterAll(() => {
  closeConnections();
});

const options = fromAddress(CLIENT_ADDRESS);

async function pages(): Promise<ReplicaMetrics[]> {
  if (!driver.replicaMetrics) throw new Error('no replica metrics');
  return driver.replicaMetrics();
}

/** Reads every replica has sent to the primary because the standby lagged. */
const fallbacks = async () =>
  (await pages()).reduce((sum, p) => sum + sumOf(p.metrics, 'db_read_fallbacks_total'), 0);

/** DB_READ_MAX_LAG_MS as the chart rendered it into the ConfigMap. */
function maxLagMs(): number {
  const objects = JSON.parse(readFileSync(renderedFile ?? '', 'utf8')) as {
    kind: string;
    data?: Record<string, string>;
  }[];
  const value = objects.find((o) => o.kind === 'ConfigMap' && o.data?.DB_READ_MAX_LAG_MS)?.data
    ?.DB_READ_MAX_LAG_MS;
  if (!value) throw new Error('the rendered ConfigMap has no DB_READ_MAX_LAG_MS');
  return Number(value);
}

const titlesOf = (body: string) => (JSON.parse(body) as { title: string }[]).map((p) => p.title);

standbyCase(
  'When the release reads on standbys, then anonymous list reads run on the standby through the ro Pooler on every replica, and with its replay paused no writer misses a write of theirs and anonymous readers skip it once it lags past DB_READ_MAX_LAG_MS',
  async () => {
    const standby = driver.standby;
    if (!standby) throw new Error('no standby control');
    const token = await signedIn(`e2e-standby-${run}@example.com`, options());
    const first = await postJson('/posts/', { title: `standby first ${run}`, content: 'c' }, options(token));
    expect(first.status).toBe(201);

    // Replay running: anonymous reads go to the standby, on each replica.
    const before = await pages();
    const committedBefore = await standby.committed();
    for (let i = 0; i < READS; i++) {
      const list = await send('GET', '/posts/public?limit=10', options());
      expect({ i, status: list.status }).toEqual({ i, status: 200 });
    }
    const after = await pages();
    const standbyReads = (list: ReplicaMetrics[]) =>
      list.map((p) => ({ name: p.name, reads: sumOf(p.metrics, 'db_reads_total', 'target="standby"') }));
    const grown = standbyReads(after).map(({ name, reads }) => ({
      name,
      reads: reads - (standbyReads(before).find((b) => b.name === name)?.reads ?? 0),
    }));
    // Every replica took part (the proxy spreads the requests) and read on the standby.
    expect(grown.length).toBeGreaterThanOrEqual(2);
    for (const replica of grown)
      expect({ ...replica, some: replica.reads > 0 }).toMatchObject({ some: true });
    const total = grown.reduce((sum, r) => sum + r.reads, 0);
    expect(total).toBeGreaterThanOrEqual(Math.ceil(READS * 0.9));
    // The standby's own count agrees: its committed transactions grew by at least those reads.
    // (PostgreSQL publishes its statistics within a second or so of a transaction's end.)
    const counted = await pollUntil(
      () => standby.committed(),
      (now) => now.standby - committedBefore.standby >= Math.ceil(READS * 0.9),
      { withinMs: 10_000, everyMs: 250 },
    );
    const standbyCommitted = counted.value.standby - committedBefore.standby;
    expect({ standbyCommitted, held: counted.held }).toMatchObject({ held: true });

    // Replay paused: the standby falls behind while writes go on.
    const bound = maxLagMs();
    const fallbacksBefore = await fallbacks();
    await standby.pauseReplay(true);
    const pausedAt = Date.now();
    try {
      const misses: string[] = [];
      const stale: string[] = [];
      for (let i = 0; i < PAIRS; i++) {
        const title = `standby pair ${String(i)} ${run}`;
        const written = await postJson('/posts/', { title, content: 'c' }, options(token));
        expect({ title, status: written.status }).toEqual({ title, status: 201 });
        const id = (JSON.parse(written.body) as { id: number }).id;
        // The writer, through whichever replica the proxy picks: by id and in their list, at once.
        const byId = await send('GET', `/posts/${String(id)}`, options(token));
        if (byId.status !== 200) misses.push(`${title}: GET by id ${String(byId.status)}`);
        const mine = await send('GET', '/posts/?limit=5', options(token));
        if (!titlesOf(mine.body).includes(title)) misses.push(`${title}: not in the writer's list`);
        // Past the bound (twice over, and a second for the lag to be measured) the standby is skipped.
        if (Date.now() - pausedAt > 2 * bound + 1000) {
          const anonymous = await send('GET', '/posts/public?limit=5', options());
          if (!titlesOf(anonymous.body).includes(title)) stale.push(title);
        } else await new Promise((resolve) => setTimeout(resolve, (2 * bound + 1000) / PAIRS));
      }
      expect(misses).toEqual([]);
      expect(stale).toEqual([]);
      expect(await fallbacks()).toBeGreaterThan(fallbacksBefore);
    } finally {
      await standby.pauseReplay(false);
    }
  },
  120_000,
);
