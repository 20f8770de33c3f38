/**
 * `npm run bench -- --posts 10000[,100000,1000000] [--duration 10] [--connections 10] [--reseed] [--out DIR]`
 *
 * For each size: seeds PostgreSQL, starts the service and the bare reference server on the same
 * data, measures every endpoint with autocannon against both, then the public list one layer at a
 * time between the two, then the service-only checks (liveness during logins, memory growth, login
 * timing). Results go to bench/results/, and docs/benchmarks.md and docs/benchmarks.svg are rebuilt
 * from every result there.
 */
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import knex from 'knex';
import * as prettier from 'prettier';
import { renderDocs, type EndpointFigures, type LadderStep, type SizeResult } from './report';
import { BENCH_PASSWORD, COMMON_WORD, pgConnection, RARE_WORD, seed } from './seed';
import { freePort, ROOT, spawnScript, waitForAnswer } from '../testing/service';

const SECRET = 'bench-signing-secret-that-is-long-enough-0123456789';

function option(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? (process.argv[i + 1] ?? fallback) : fallback;
}
const sizes = option('posts', '10000')
  .split(',')
  .map((s) => Number(s.trim()));
const duration = Number(option('duration', '10'));
const connections = Number(option('connections', '10'));
const reseed = process.argv.includes('--reseed');
/** Results and docs go to DIR/results and DIR/docs instead of bench/results and docs (a smoke run in CI). */
const outDir = option('out', '');
/** Free text on the conditions (other load on the machine, say), printed with the figures. */
const note = option('note', '');
if (sizes.some((s) => ![10_000, 100_000, 1_000_000].includes(s))) {
  process.stderr.write('--posts takes 10000, 100000 or 1000000 (comma-separated for several)\n');
  process.exit(2);
}

const log = (line: string) => {
  process.stdout.write(`${line}\n`);
};

interface Server {
  child: ChildProcessWithoutNullStreams;
  base: string;
  stop(): Promise<void>;
}

/** Starts a server script on a free port and resolves once it answers HTTP. */
async function startServer(script: string, env: Record<string, string>): Promise<Server> {
  const port = await freePort();
  // The service logs at warn here, so readiness is an HTTP answer, not the "listening" line.
  const proc = spawnScript(script, { ...process.env, ...env, PORT: String(port) }, { keep: () => false });
  const base = `http://127.0.0.1:${String(port)}`;
  try {
    await waitForAnswer(`${base}/healthz/live`, proc, 120_000);
  } catch (error) {
    await proc.stop();
    throw new Error(`${script} did not start`, { cause: error });
  }
  return {
    child: proc.child,
    base,
    stop: async () => {
      await proc.stop();
    },
  };
}

async function run(options: autocannon.Options): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    // A run is bounded by its amount of requests when given one, otherwise by time.
    const bound = options.amount === undefined ? { duration } : {};
    autocannon({ connections, ...bound, ...options }, (error: unknown, result) => {
      if (error) reject(error instanceof Error ? error : new Error('autocannon failed'));
      else resolve(result);
    });
  });
}

const figures = (r: autocannon.Result, cpuMs: number | undefined): EndpointFigures => ({
  rps: Math.round(r.requests.average),
  p50: r.latency.p50,
  p99: r.latency.p99,
  errors: r.errors + r.timeouts,
  non2xx: r.non2xx,
  requests: r.requests.total,
  ...(cpuMs === undefined || r.requests.total === 0
    ? {}
    : { cpuUsPerRequest: Math.round((cpuMs * 1000) / r.requests.total) }),
});

/**
 * CPU time (user + system) a process has used, in ms, from /proc (Linux); undefined elsewhere.
 * Per request it is a steadier measure of a server's own cost than throughput, which also depends
 * on the database and the load generator sharing the machine.
 */
function cpuMsOf(pid: number | undefined): number | undefined {
  try {
    const fields =
      readFileSync(`/proc/${String(pid)}/stat`, 'utf8')
        .split(') ')[1]
        ?.split(' ') ?? [];
    const ticks = Number(fields[11]) + Number(fields[12]);
    // Linux reports these in clock ticks of 1/100 s (USER_HZ) on every common architecture.
    return Number.isFinite(ticks) ? ticks * 10 : undefined;
  } catch {
    return undefined;
  }
}

async function login(
  base: string,
  username: string,
  password: string,
): Promise<{ status: number; ms: number; token?: string }> {
  const started = performance.now();
  const res = await fetch(`${base}/login`, {
    method: 'POST',
    body: new URLSearchParams({ username, password }),
  });
  const body = (await res.json()) as { access_token?: string };
  return { status: res.status, ms: performance.now() - started, token: body.access_token };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] ?? 0) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
};

const rssMb = (pid: number): number => {
  const status = readFileSync(`/proc/${String(pid)}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
};

/** Everything the bench asks of a server, endpoint by endpoint. */
function endpointsOf(
  base: string,
  token: string,
  publishedIds: number[],
  voteIds: number[],
): [string, autocannon.Options][] {
  const auth = { authorization: `Bearer ${token}` };
  return [
    ['public list', { url: `${base}/posts/public` }],
    ['authenticated list', { url: `${base}/posts/`, headers: auth }],
    [`search rare ("${RARE_WORD}")`, { url: `${base}/posts/?search=${RARE_WORD}`, headers: auth }],
    [`search common ("${COMMON_WORD}")`, { url: `${base}/posts/?search=${COMMON_WORD}`, headers: auth }],
    [
      'get by id',
      {
        url: base,
        requests: [
          {
            method: 'GET',
            headers: auth,
            setupRequest: (req) => ({
              ...req,
              path: `/posts/${String(publishedIds[Math.floor(Math.random() * publishedIds.length)])}`,
            }),
          },
        ],
      },
    ],
    [
      'vote + unvote',
      {
        url: base,
        // Each connection toggles its own vote on its own post, so every answer is a 201.
        setupClient: (() => {
          let next = 0;
          return (client: autocannon.Client) => {
            const postId = voteIds[next++ % voteIds.length] ?? 1;
            const headers = { ...auth, 'content-type': 'application/json' };
            client.setRequests([
              { method: 'POST', path: '/votes/', headers, body: JSON.stringify({ post_id: postId, dir: 1 }) },
              { method: 'POST', path: '/votes/', headers, body: JSON.stringify({ post_id: postId, dir: 0 }) },
            ]);
          };
        })(),
      },
    ],
    [
      'login (bcrypt cost 12)',
      {
        url: `${base}/login`,
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ username: 'user1@bench.example', password: BENCH_PASSWORD }).toString(),
      },
    ],
  ];
}

/** One server on one endpoint: a short warm-up (JIT, pool connections, PostgreSQL's cache), then the run. */
async function measure(
  server: Server,
  options: autocannon.Options,
  beforeRun?: () => Promise<void>,
): Promise<EndpointFigures> {
  await run({ ...options, duration: 2 });
  await beforeRun?.();
  const cpuBefore = cpuMsOf(server.child.pid);
  const result = await run(options);
  const cpuAfter = cpuMsOf(server.child.pid);
  return figures(
    result,
    cpuBefore === undefined || cpuAfter === undefined ? undefined : cpuAfter - cpuBefore,
  );
}

function logFigures(who: string, what: string, f: EndpointFigures): void {
  log(
    `  ${who.padEnd(9)} ${what.padEnd(28)} ${String(f.rps).padStart(6)} req/s  p50 ${String(f.p50).padStart(4)} ms  p99 ${String(f.p99).padStart(5)} ms  errors ${String(f.errors)}  non-2xx ${String(f.non2xx)}  server CPU ${f.cpuUsPerRequest === undefined ? '?' : String(f.cpuUsPerRequest)} µs/request`,
  );
}

/**
 * The public list up the ladder from the reference to the service, one layer added per step, so
 * the gap between the two is split into what each layer costs. The steps run one after the other
 * on a quiet machine; their order is the order of the ladder.
 */
async function measureLadder(
  env: Record<string, string>,
  servers: { service: Server; reference: Server },
): Promise<LadderStep[]> {
  // [short label, what the step is, the server or the ladder.ts rung to start]
  const steps: [string, string, Server | string][] = [
    ['reference', 'reference: node:http + pg, the same SQL', servers.reference],
    ['knex', "node:http + the service's knex repository", 'knex'],
    ['express', 'Express 5 + the knex repository + res.json', 'express'],
    ['app', 'the whole app (createApp): middleware, validation, routers', 'app'],
    ['service', 'the service (main.ts): the app inside terminus', servers.service],
  ];
  const out: LadderStep[] = [];
  for (const [label, name, target] of steps) {
    const server =
      typeof target === 'string' ? await startServer('bench/ladder.ts', { ...env, RUNG: target }) : target;
    try {
      const f = await measure(server, { url: `${server.base}/posts/public` });
      out.push({ name, figures: f });
      logFigures('ladder', label, f);
    } finally {
      if (typeof target === 'string') await server.stop();
    }
  }
  return out;
}

/**
 * Measures both servers endpoint by endpoint, back to back, the one going first alternating from
 * one endpoint to the next: a disturbance on the machine (a checkpoint, another process) then
 * lands on both sides instead of on whichever server would otherwise be measured first.
 */
async function measureBoth(
  servers: { service: Server; reference: Server },
  token: string,
  publishedIds: number[],
  voteIds: number[],
  resetVotes: () => Promise<void>,
): Promise<Record<'service' | 'reference', Record<string, EndpointFigures>>> {
  const out: Record<'service' | 'reference', Record<string, EndpointFigures>> = {
    service: {},
    reference: {},
  };
  const endpoints = {
    service: endpointsOf(servers.service.base, token, publishedIds, voteIds),
    reference: endpointsOf(servers.reference.base, token, publishedIds, voteIds),
  };
  for (const [i, [name]] of endpoints.service.entries()) {
    const order = i % 2 === 0 ? (['service', 'reference'] as const) : (['reference', 'service'] as const);
    for (const side of order) {
      const options = endpoints[side][i]?.[1];
      if (!options) throw new Error(`no endpoint ${name} for the ${side}`);
      // A run stopped between a vote and its withdrawal leaves the vote; the next run starts clean.
      out[side][name] = await measure(servers[side], options, resetVotes);
      logFigures(side, name, out[side][name]);
    }
  }
  return out;
}

async function benchSize(posts: number): Promise<SizeResult> {
  const info = await seed(posts, reseed, log);
  log(
    `${info.database}: ${String(info.users)} users, ${String(info.posts)} posts, ${String(info.votes)} votes${info.seededNow ? ` (seeded in ${info.seedSeconds.toFixed(0)} s)` : ' (reused)'}`,
  );
  const db = knex({
    client: 'pg',
    connection: { ...pgConnection, database: info.database },
    pool: { min: 0, max: 1 },
  });
  const publishedIds = (
    await db.raw<{ rows: { id: number }[] }>(
      'SELECT id FROM posts WHERE published ORDER BY random() LIMIT 2000',
    )
  ).rows.map((r) => r.id);
  const voteIds = publishedIds.slice(0, 200);
  const benchUserId = 1;
  const resetVotes = async () => {
    await db('votes').where('user_id', benchUserId).whereIn('post_id', voteIds).delete();
  };

  const env = {
    NODE_ENV: 'production',
    // The metrics listener (when present) must not collide with anything else running.
    METRICS_PORT: '0',
    LOG_LEVEL: 'warn',
    SECRET_KEY: SECRET,
    BCRYPT_ROUNDS: '12',
    DB_HOSTNAME: pgConnection.host,
    DB_PORT: String(pgConnection.port),
    DB_USERNAME: pgConnection.user,
    DB_PASSWORD: pgConnection.password,
    DB_NAME: info.database,
  };
  // Seeding leaves much to write out; a checkpoint now keeps that flush out of the measurements.
  await db.raw('CHECKPOINT').catch(() => {
    log('  (no CHECKPOINT: the bench user may not run one; measuring anyway)');
  });
  const service = await startServer('service/src/main.ts', env);
  const reference = await startServer('bench/reference.ts', env);
  try {
    const token = (await login(service.base, 'user1@bench.example', BENCH_PASSWORD)).token ?? '';
    log(`service ${service.base}, reference (bare node:http + pg) ${reference.base}:`);
    const { service: svc, reference: ref } = await measureBoth(
      { service, reference },
      token,
      publishedIds,
      voteIds,
      resetVotes,
    );
    log('the public list, one layer at a time:');
    const ladder = await measureLadder(env, { service, reference });

    // Liveness while 20 logins hash at once: bcrypt runs on libuv's pool, never on the event loop.
    const [logins, live] = await Promise.all([
      run({
        url: `${service.base}/login`,
        connections: 20,
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ username: 'user1@bench.example', password: BENCH_PASSWORD }).toString(),
      }),
      run({ url: `${service.base}/healthz/live`, connections: 1 }),
    ]);
    log(
      `  /healthz/live during 20 concurrent logins: p50 ${String(live.latency.p50)} ms, p99 ${String(live.latency.p99)} ms`,
    );

    // Memory: the same mix of requests, resident size after 20,000 and after 100,000 of them.
    const auth = { authorization: `Bearer ${token}` };
    const mix: autocannon.Request[] = [
      { method: 'GET', path: '/posts/public?limit=5' },
      { method: 'GET', path: `/posts/${String(publishedIds[0])}`, headers: auth },
      { method: 'GET', path: '/posts/?limit=5', headers: auth },
      { method: 'GET', path: '/no/such/path' },
    ];
    // A single reading lands anywhere in a garbage-collection cycle (±20 % seen); the median of
    // readings taken through the last 10,000 requests of each stretch does not.
    const residentDuring = async (amount: number): Promise<number> => {
      const samples: number[] = [];
      const timer = setInterval(() => samples.push(rssMb(service.child.pid ?? 0)), 100);
      try {
        await run({ url: service.base, requests: mix, amount });
      } finally {
        clearInterval(timer);
      }
      return median(samples);
    };
    await run({ url: service.base, requests: mix, amount: 10_000 });
    const rss20k = await residentDuring(10_000);
    await run({ url: service.base, requests: mix, amount: 70_000 });
    const rss100k = await residentDuring(10_000);
    log(
      `  resident memory (median through requests 10,000-20,000 and 90,000-100,000): ${rss20k.toFixed(1)} MB, ${rss100k.toFixed(1)} MB`,
    );

    // Login timing: unknown e-mail against known e-mail with a wrong password, interleaved.
    const unknown: number[] = [];
    const wrong: number[] = [];
    for (let i = 0; i < 25; i++) {
      unknown.push((await login(service.base, `nobody${String(i)}@bench.example`, 'wrong-password-1')).ms);
      wrong.push((await login(service.base, 'user2@bench.example', 'wrong-password-1')).ms);
    }
    log(
      `  login median: unknown e-mail ${median(unknown).toFixed(0)} ms, wrong password ${median(wrong).toFixed(0)} ms`,
    );

    return {
      posts,
      users: info.users,
      votes: info.votes,
      measuredAt: new Date().toISOString(),
      duration,
      connections,
      ...(note ? { note } : {}),
      machine: {
        cpus: `${String(os.cpus().length)} × ${os.cpus()[0]?.model ?? 'unknown'}`,
        memoryGb: Math.round(os.totalmem() / 2 ** 30),
        node: process.version,
        postgres: await postgresVersion(),
        loadAverage: os.loadavg().map((l) => Number(l.toFixed(2))),
      },
      service: svc,
      reference: ref,
      ladder,
      liveDuringLogins: {
        p50: live.latency.p50,
        p99: live.latency.p99,
        loginRps: Math.round(logins.requests.average),
      },
      memory: { rss20k, rss100k },
      loginTiming: { unknownMedianMs: median(unknown), wrongPasswordMedianMs: median(wrong) },
    };
  } finally {
    await service.stop();
    await reference.stop();
    await db.destroy();
  }
}

async function postgresVersion(): Promise<string> {
  const db = knex({
    client: 'pg',
    connection: { ...pgConnection, database: 'postgres' },
    pool: { min: 0, max: 1 },
  });
  const v =
    (await db.raw<{ rows: { v: string }[] }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ??
    '?';
  await db.destroy();
  return v;
}

async function main(): Promise<void> {
  const resultsDir = outDir ? path.resolve(outDir, 'results') : path.join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  for (const posts of sizes) {
    log(
      `\n== ${String(posts)} posts (load average ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')})`,
    );
    const result = await benchSize(posts);
    // Formatted as the repository's Prettier check expects, so `npm run lint` stays clean.
    const json = await prettier.format(JSON.stringify(result), { parser: 'json' });
    writeFileSync(path.join(resultsDir, `posts-${String(posts)}.json`), json);
  }
  const written = renderDocs(resultsDir, outDir ? path.resolve(outDir, 'docs') : path.join(ROOT, 'docs'));
  log(`\nwrote ${written.join(', ')}`);
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
