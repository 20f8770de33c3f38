/**
 * `npm run bench -- --posts 10000[,100000,1000000] [--duration 10] [--connections 10,64] [--node image|current|PATH] [--reseed] [--memory-requests 100000]`
 *
 * For each size: seeds PostgreSQL, starts the service and the bare reference server on the same
 * data, measures every endpoint with autocannon against both at each connection count, then (at
 * the first count) the public list one layer at a time between the two, deep pages by offset and
 * by cursor, then the service-only checks (liveness during logins, memory growth, login timing),
 * and prints that size's tables (targets, endpoints, checks, ladder, deep pages) as Markdown. With
 * more than one size, it ends with the tables across them: the targets, latency by size and the ladder.
 */
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import {
  acrossSizes,
  sizeTables,
  targetsOf,
  type ConnectionRun,
  type DeepPage,
  type EndpointFigures,
  type LadderStep,
  type SizeResult,
} from './report';
import { flag, fmt, loadAverageText, log, machine, numbers, option, runMain, SIZES, usage } from './common';
import { serverNode } from './node';
import { call } from '../harness/client';
import { benchToken } from './rounds';
import { knexTo } from '../harness/postgres';
import { BENCH_PASSWORD, benchServiceEnv, COMMON_WORD, RARE_WORD, seed } from '../harness/seed';
import {
  load,
  measure as measureOn,
  median,
  progress,
  settle,
  startServer as startServerOn,
  type Server,
} from './measure';

const sizes = numbers('posts', '10000');
const duration = Number(option('duration', '10'));
const connectionCounts = numbers('connections', '10,64');
/** The ladder and the deep pages run at this count only. */
const firstCount = connectionCounts[0] ?? 10;
const reseed = flag('reseed');
/** Requests in the memory check: the resident size through their second tenth and their last. */
const memoryRequests = Number(option('memory-requests', '100000'));
/** Free text on the conditions (other load on the machine, say), printed with the figures. */
const note = option('note', '');
/** The Node the servers run on (tools/bench/node.ts): the image's release unless told otherwise. */
const node = serverNode(option('node', 'image'));
usage(
  sizes.every((s) => SIZES.includes(s)),
  '--posts takes 10000, 100000 or 1000000 (comma-separated for several)',
);
usage(
  connectionCounts.every((c) => Number.isInteger(c) && c >= 1),
  '--connections takes positive whole numbers, comma-separated',
);
usage(
  Number.isInteger(memoryRequests) && memoryRequests >= 10_000 && memoryRequests % 10 === 0,
  '--memory-requests takes a whole number of at least 10000, a multiple of 10',
);
/** Seconds of warm-up before each measured run (JIT, pool connections, PostgreSQL's cache). */
const WARMUP = 1;
/** Seconds per deep-page run: one page fetched over and over needs less than a whole endpoint. */
const deepDuration = Math.min(5, duration);
const DEPTHS = [0, 1_000, 10_000, 100_000];
/** The endpoint table's rows (endpointsOf), for the time estimate. */
const ENDPOINTS = 7;

const startServer = (script: string, env: Record<string, string>): Promise<Server> =>
  startServerOn(script, env, { node: node.path });

const run = (options: autocannon.Options): Promise<autocannon.Result> =>
  load(options, { duration, connections: firstCount });

/**
 * One server on one endpoint at the first count (see measure.ts); `warm: false` skips the warm-up
 * (logins: bcrypt needs none, and its queue only delays the run).
 */
const measure = (
  server: Server,
  options: autocannon.Options,
  beforeRun?: () => Promise<void>,
  warm = true,
): Promise<EndpointFigures> =>
  measureOn(server, options, { duration, connections: firstCount, warmup: warm ? WARMUP : 0 }, beforeRun);

function logFigures(who: string, what: string, f: EndpointFigures): void {
  log(progress(`  ${who.padEnd(9)} ${what.padEnd(28)}`, f));
}

/** The bench user's login as autocannon sends it. */
const LOGIN = {
  method: 'POST',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams({ username: 'user1@bench.example', password: BENCH_PASSWORD }).toString(),
} as const;

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
        // 64 logins at once queue for seconds behind bcrypt; autocannon's 10 s default would count them as errors.
        timeout: 30,
        ...LOGIN,
      },
    ],
  ];
}

/**
 * The ladder's rungs in the order measured: `key` is ladder.ts's LADDER_STEP (or one of the two
 * servers), `basedOn` the rung it adds to. The "express + …" rungs each add exactly one piece of
 * the app.
 */
const LADDER: { key: string; name: string; basedOn?: string }[] = [
  { key: 'reference', name: 'reference: node:http + pg, the same SQL' },
  { key: 'knex', name: "node:http + the service's knex repository", basedOn: 'reference' },
  { key: 'express', name: 'Express 5 + the knex repository + res.json, no ETag', basedOn: 'knex' },
  { key: 'cors', name: 'express + cors (crossOrigin)', basedOn: 'express' },
  { key: 'metrics', name: 'express + metrics middleware', basedOn: 'express' },
  { key: 'request-log', name: 'express + request log', basedOn: 'express' },
  { key: 'security-headers', name: 'express + security headers', basedOn: 'express' },
  { key: 'protocol', name: 'express + requireHost + closeAfterOversizedBody', basedOn: 'express' },
  { key: 'etag', name: "express + Express's weak ETag", basedOn: 'express' },
  { key: 'app', name: 'the whole app (createApp): middleware, validation, routers', basedOn: 'express' },
  { key: 'service', name: 'the service (main.ts): the app inside terminus', basedOn: 'app' },
];

/**
 * The public list up the ladder from the reference to the service, one layer added per step, so
 * the gap between the two is split into what each layer costs. The steps run one after the other
 * on a quiet machine; their order is the order of the ladder.
 */
async function measureLadder(
  env: Record<string, string>,
  servers: { service: Server; reference: Server },
): Promise<LadderStep[]> {
  const out: LadderStep[] = [];
  for (const { key, name, basedOn } of LADDER) {
    const started =
      key === 'reference' || key === 'service'
        ? undefined
        : await startServer('tools/bench/ladder.ts', { ...env, LADDER_STEP: key });
    const server = started ?? (key === 'reference' ? servers.reference : servers.service);
    try {
      const f = await measure(server, { url: `${server.base}/posts/public` });
      out.push({ key, name, ...(basedOn ? { basedOn } : {}), figures: f });
      logFigures('ladder', key, f);
    } finally {
      await started?.stop();
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
  connections: number,
  token: string,
  publishedIds: number[],
  voteIds: number[],
  resetVotes: () => Promise<void>,
): Promise<ConnectionRun> {
  const out: ConnectionRun = { connections, service: {}, reference: {} };
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
      const f = await measure(
        servers[side],
        { connections, ...options },
        resetVotes,
        !name.startsWith('login'),
      );
      out[side][name] = f;
      logFigures(side, name, f);
    }
  }
  return out;
}

/** The `rel="next"` target of a Link header, if there is one. */
function nextLink(header: string | null): string | undefined {
  for (const part of (header ?? '').split(',')) {
    const m = /^\s*<([^>]*)>\s*;(.*)$/.exec(part);
    if (m && /(^|;)\s*rel\s*=\s*"?([^";]*\s)?next(\s[^";]*)?"?\s*(;|$)/i.test(m[2] ?? '')) return m[1];
  }
  return undefined;
}

/**
 * Both lists at each depth below the number of posts, service only: the page at `?skip=<depth>`,
 * and the same page reached by cursor, i.e. the Link `rel="next"` of the page `?skip=<depth - 10>`.
 * Without a Link header (no cursors served) the cursor figures are null.
 */
async function measureDeepPages(service: Server, token: string, posts: number): Promise<DeepPage[]> {
  const auth = { authorization: `Bearer ${token}` };
  const lists: [string, string, Record<string, string>][] = [
    ['public list', '/posts/public', {}],
    ['authenticated list', '/posts/', auth],
  ];
  const out: DeepPage[] = [];
  for (const [list, listPath, headers] of lists)
    for (const depth of DEPTHS.filter((d) => d < posts)) {
      const deep = (url: string) => measure(service, { url, headers, duration: deepDuration });
      const offset = await deep(`${service.base}${listPath}?skip=${String(depth)}`);
      logFigures('deep', `${list} skip ${String(depth)}`, offset);
      let cursor: EndpointFigures | null = null;
      if (depth > 0) {
        const before = await call(service.base, `${listPath}?limit=10&skip=${String(depth - 10)}`, {
          headers,
        });
        const next = nextLink(before.headers.get('link'));
        if (next) {
          // Path-absolute by contract; resolved against the base in case it is a full URL.
          cursor = await deep(new URL(next, service.base).href);
          logFigures('deep', `${list} cursor ${String(depth)}`, cursor);
        } else
          log(
            `  deep      ${list} cursor ${String(depth)}: no Link rel="next" on the page before (no cursors served)`,
          );
      }
      out.push({ list, depth, offset, cursor });
    }
  return out;
}

/** Liveness while 20 logins hash at once: bcrypt runs on libuv's pool, never on the event loop. */
async function livenessDuringLogins(service: Server): Promise<SizeResult['liveDuringLogins']> {
  const [logins, live] = await Promise.all([
    run({
      url: `${service.base}/login`,
      connections: 20,
      ...LOGIN,
    }),
    run({ url: `${service.base}/healthz/live`, connections: 1 }),
  ]);
  log(
    `  /healthz/live during 20 concurrent logins: p50 ${String(live.latency.p50)} ms, p99 ${String(live.latency.p99)} ms`,
  );
  return { p50: live.latency.p50, p99: live.latency.p99, loginRps: Math.round(logins.requests.average) };
}

/** Memory: the same mix of requests, resident size through the second tenth of them and through the last. */
async function residentMemory(
  service: Server,
  token: string,
  publishedIds: number[],
): Promise<SizeResult['memory']> {
  const auth = { authorization: `Bearer ${token}` };
  const mix: autocannon.Request[] = [
    { method: 'GET', path: '/posts/public?limit=5' },
    { method: 'GET', path: `/posts/${String(publishedIds[0])}`, headers: auth },
    { method: 'GET', path: '/posts/?limit=5', headers: auth },
    { method: 'GET', path: '/no/such/path' },
  ];
  // A single reading lands anywhere in a garbage-collection cycle (±20 % seen); the median of
  // readings taken through each stretch does not. One more at its end: a short stretch may be over
  // before the first tick.
  const residentDuring = async (amount: number): Promise<number> => {
    const samples: number[] = [];
    const timer = setInterval(() => samples.push(rssMb(service.child.pid ?? 0)), 100);
    try {
      await run({ url: service.base, requests: mix, amount });
    } finally {
      clearInterval(timer);
    }
    samples.push(rssMb(service.child.pid ?? 0));
    return median(samples);
  };
  const tenth = memoryRequests / 10;
  await run({ url: service.base, requests: mix, amount: tenth });
  const early = await residentDuring(tenth);
  await run({ url: service.base, requests: mix, amount: memoryRequests - 3 * tenth });
  const late = await residentDuring(tenth);
  log(
    `  resident memory (median through requests ${fmt(tenth)}-${fmt(2 * tenth)} and ${fmt(memoryRequests - tenth)}-${fmt(memoryRequests)}): ${early.toFixed(1)} MB, ${late.toFixed(1)} MB`,
  );
  return { requests: memoryRequests, early, late };
}

/** Login timing: unknown e-mail against known e-mail with a wrong password, interleaved. */
async function loginTimings(service: Server): Promise<SizeResult['loginTiming']> {
  const unknown: number[] = [];
  const wrong: number[] = [];
  const ms = async (username: string) =>
    (await call(service.base, '/login', { form: { username, password: 'wrong-password-1' } })).ms;
  for (let i = 0; i < 25; i++) {
    unknown.push(await ms(`nobody${String(i)}@bench.example`));
    wrong.push(await ms('user2@bench.example'));
  }
  log(
    `  login median: unknown e-mail ${median(unknown).toFixed(0)} ms, wrong password ${median(wrong).toFixed(0)} ms`,
  );
  return { unknownMedianMs: median(unknown), wrongPasswordMedianMs: median(wrong) };
}

async function benchSize(posts: number): Promise<SizeResult> {
  const info = await seed(posts, reseed, log);
  log(
    `${info.database}: ${String(info.users)} users, ${String(info.posts)} posts, ${String(info.votes)} votes${info.seededNow ? ` (seeded in ${info.seedSeconds.toFixed(0)} s)` : ' (reused)'}`,
  );
  const db = knexTo(info.database, 1);
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

  const env = benchServiceEnv(info.database);
  // Seeding leaves much to write out; a checkpoint now keeps that flush out of the measurements.
  await db.raw('CHECKPOINT').catch(() => {
    log('  (no CHECKPOINT: the bench user may not run one; measuring anyway)');
  });
  const service = await startServer('service/src/main.ts', env);
  const reference = await startServer('tools/bench/reference.ts', env);
  try {
    const token = await benchToken(service.base);
    log(`service ${service.base}, reference (bare node:http + pg) ${reference.base}:`);
    const runs: ConnectionRun[] = [];
    for (const connections of connectionCounts) {
      log(`${String(connections)} connections:`);
      runs.push(
        await measureBoth({ service, reference }, connections, token, publishedIds, voteIds, resetVotes),
      );
    }
    log(`the public list, one layer at a time (${String(firstCount)} connections):`);
    const ladder = await measureLadder(env, { service, reference });
    log(`deep pages, service only (${String(firstCount)} connections, ${String(deepDuration)} s each):`);
    const deepPages = await measureDeepPages(service, token, posts);

    const liveDuringLogins = await livenessDuringLogins(service);
    await settle(service);
    const memory = await residentMemory(service, token, publishedIds);
    const loginTiming = await loginTimings(service);

    return {
      posts,
      users: info.users,
      votes: info.votes,
      measuredAt: new Date().toISOString(),
      duration,
      deepDuration,
      connections: connectionCounts,
      ...(note ? { note } : {}),
      machine: await machine(node.version),
      runs,
      ladder,
      deepPages,
      targets: targetsOf({ runs }),
      liveDuringLogins,
      memory,
      loginTiming,
    };
  } finally {
    await service.stop();
    await reference.stop();
    await db.destroy();
  }
}

/**
 * Rough seconds a size takes: the endpoint table at every count on both servers, the ladder (a
 * few seconds to start each rung's process), the deep pages, and the service-only checks (the
 * memory check the longest of them).
 */
function estimateSeconds(posts: number): number {
  const table = connectionCounts.length * ENDPOINTS * 2 * (WARMUP + duration);
  const ladder = LADDER.length * (WARMUP + duration + 3);
  const depths = DEPTHS.filter((d) => d < posts).length;
  const deep = 2 * (2 * depths - 1) * (WARMUP + deepDuration);
  const checks = duration + (70 * memoryRequests) / 100_000 + 15 + 10;
  // Waiting for idle: about 0.4 s a run, and the logins left queued (bcrypt: about 8 a second here).
  const settling = 0.4 * (connectionCounts.length * ENDPOINTS * 2 + LADDER.length + 2 * depths * 2);
  const loginQueues = connectionCounts.reduce((t, c) => t + (2 * c) / 8, 0);
  return table + ladder + deep + checks + settling + loginQueues;
}

async function main(): Promise<void> {
  const estimate = sizes.reduce((t, posts) => t + estimateSeconds(posts), 0);
  log(
    `sizes ${sizes.join(', ')}; ${connectionCounts.join(' and ')} connections; ${String(duration)} s per run (${String(WARMUP)} s warm-up, deep pages ${String(deepDuration)} s); about ${String(Math.ceil(estimate / 60))} min in all (seeding not counted)`,
  );
  const results: SizeResult[] = [];
  for (const posts of sizes) {
    log(`\n== ${String(posts)} posts (load average ${loadAverageText()})`);
    const result = await benchSize(posts);
    results.push(result);
    log(['', ...sizeTables(result)].join('\n'));
  }
  log(acrossSizes(results).join('\n'));
}

runMain(main);
