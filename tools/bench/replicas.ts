/**
 * `npm run bench:replicas -- [--duration 5] [--connections 10] [--posts 200]`
 *
 * The primary's CPU per request of the anonymous public feed, today's way (every read on the
 * primary) against reads on standbys (DB_READ_HOSTNAME): a primary and two streaming standbys of
 * the harness (tools/harness/replicated-postgres.ts), one service process per way, autocannon on
 * GET /posts/public without a token, then POST /posts/ with one (the primary's and the standbys' CPU
 * per write). CPU is each server's backends' (user + system, from /proc):
 * the processes whose parent is its postmaster, read before and after each run. Prints a table; a
 * figure, not a test: the machine's other load moves it.
 */
import path from 'node:path';
import autocannon from 'autocannon';
import { option, runMain, table, type Row } from './common';
import { cpuMsOf, load, postgresProcesses } from './measure';
import { account, call } from '../harness/client';
import { serviceEnv } from '../harness/env';
import { ReplicatedPostgres } from '../harness/replicated-postgres';
import { startService, stopAll, type ServiceProcess } from '../harness/service';

const DURATION_S = Number(option('duration', '5'));
const CONNECTIONS = Number(option('connections', '10'));
const POSTS = Number(option('posts', '200'));

/** CPU ms of every process of the server now; processes that ended since are left out of both reads. */
const cpuOf = (pids: number[]): Map<number, number> =>
  new Map(pids.flatMap((pid) => (cpuMsOf(pid) === undefined ? [] : [[pid, cpuMsOf(pid) ?? 0] as const])));

function spent(before: Map<number, number>, after: Map<number, number>): number {
  let ms = 0;
  for (const [pid, now] of after) ms += now - (before.get(pid) ?? 0);
  return ms;
}

/** What autocannon sends: the anonymous feed by default, a post with a token for the write run. */
type Request = Pick<autocannon.Options, 'method' | 'headers' | 'body'> & { path: string };

const FEED: Request = { path: '/posts/public' };

async function measure(
  cluster: ReplicatedPostgres,
  svc: ServiceProcess,
  request: Request = FEED,
): Promise<{ requests: number; primaryUs: number; standbysUs: number; serviceUs: number }> {
  const dirs = ['primary', 'standby', 'standby2'].map((d) => path.join(cluster.dir, d));
  // Backends open with the first requests: a short warm-up, then the processes are listed.
  const { path: target, ...sent } = request;
  const options = { url: `${svc.base}${target}`, ...sent };
  const run = { duration: DURATION_S, connections: CONNECTIONS };
  await load({ ...options, duration: 1 }, run);
  const pids = dirs.map(postgresProcesses);
  const before = pids.map(cpuOf);
  const serviceBefore = cpuMsOf(svc.pid) ?? 0;
  const result = await load(options, run);
  const after = pids.map(cpuOf);
  const serviceMs = (cpuMsOf(svc.pid) ?? 0) - serviceBefore;
  const requests = result.requests.total;
  const perRequest = (ms: number) => Math.round((ms * 1000) / Math.max(requests, 1));
  const [primaryMs = 0, ...standbyMs] = before.map((b, i) => spent(b, after[i] ?? new Map<number, number>()));
  return {
    requests,
    primaryUs: perRequest(primaryMs),
    standbysUs: perRequest(standbyMs.reduce((a, b) => a + b, 0)),
    serviceUs: perRequest(serviceMs),
  };
}

async function main(): Promise<void> {
  const cluster = new ReplicatedPostgres({ standbys: 2 });
  try {
    await cluster.init();
    const env = (extra: Record<string, string>) =>
      serviceEnv({
        PORT: '0',
        LOG_LEVEL: 'info',
        DB_HOSTNAME: '127.0.0.1',
        DB_PORT: String(cluster.primaryPort),
        DB_NAME: 'postgres',
        ...extra,
      });
    const today = await startService(env({}));
    const onStandbys = await startService(
      env({ DB_READ_HOSTNAME: cluster.standbyPorts.map((p) => `127.0.0.1:${String(p)}`).join(',') }),
    );
    const token = await account(today.base, 'bench-replicas@example.com');
    for (let i = 0; i < POSTS; i++)
      await call(today.base, '/posts/', { token, json: { title: `post ${String(i)}`, content: 'content' } });
    const rows: Row[] = [];
    // Writes go to the primary either way: the standbys' figure is their replay of them.
    const write: Request = {
      path: '/posts/',
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'bench write', content: 'content' }),
    };
    for (const [way, svc, request] of [
      ['today: every read on the primary', today, FEED],
      ['reads on standbys', onStandbys, FEED],
      ['writes (POST /posts/ with a token)', onStandbys, write],
    ] as const) {
      const m = await measure(cluster, svc, request);
      rows.push({
        Way: way,
        Connections: CONNECTIONS,
        's a run': DURATION_S,
        'Posts before': POSTS,
        Requests: m.requests,
        "Primary's CPU per request (µs)": m.primaryUs,
        "Standbys' CPU per request (µs)": m.standbysUs,
        'Service CPU per request (µs)': m.serviceUs,
      });
    }
    process.stdout.write(['', ...table(rows), ''].join('\n'));
  } finally {
    await stopAll();
    cluster.destroy();
  }
}

runMain(main);
