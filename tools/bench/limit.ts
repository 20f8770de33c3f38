/**
 * `npm run bench:limit -- [--posts 100000] [--rounds 7] [--duration 4] [--connections 10,64] [--note TEXT] [--node image|current|PATH]`
 *
 * The service's lists against the physical limit: tools/bench/reference.ts with REFERENCE_VERIFIER=crypto
 * (bare node:http + pg, the service's own statements, the token checked with node:crypto alone),
 * beside the library reference (the same server checking with jsonwebtoken). The answers are
 * compared first; then alternating rounds (tools/bench/rounds.ts). Prints each list's service / limit
 * and service / reference, median and spread of the rounds, at each count, as Markdown tables.
 */
import os from 'node:os';
import knex from 'knex';
import { limitSection, type LimitKey, type LimitResult, type LimitSeries } from './limit-report';
import { startServer, type EndpointFigures } from './measure';
import { serverNode } from './node';
import {
  alternatingRounds,
  benchToken,
  option,
  sameAnswers,
  type Contender,
  type MeasuredList,
} from './rounds';
import { benchServiceEnv, COMMON_WORD, pgConnection, seed } from '../harness/seed';

const WARMUP = 1;
const posts = Number(option('posts', '100000'));
const rounds = Number(option('rounds', '7'));
const duration = Number(option('duration', '4'));
const connectionCounts = option('connections', '10,64')
  .split(',')
  .map((s) => Number(s.trim()));
const note = option('note', '');
const node = serverNode(option('node', 'image'));
if (
  ![10_000, 100_000, 1_000_000].includes(posts) ||
  !Number.isInteger(rounds) ||
  rounds < 1 ||
  !(duration >= 1) ||
  connectionCounts.some((c) => !Number.isInteger(c) || c < 1)
) {
  process.stderr.write(
    '--posts takes 10000, 100000 or 1000000; --rounds a whole number ≥ 1; --duration at least 1; --connections positive whole numbers, comma-separated\n',
  );
  process.exit(2);
}

const log = (line: string) => {
  process.stdout.write(`${line}\n`);
};

const LISTS: MeasuredList[] = [
  { list: 'public list', path: '/posts/public', signedIn: false },
  { list: 'signed-in list', path: '/posts/', signedIn: true },
  { list: `signed-in search ("${COMMON_WORD}")`, path: `/posts/?search=${COMMON_WORD}`, signedIn: true },
];

const loadAverage = () => os.loadavg().map((l) => Number(l.toFixed(2)));

async function postgresVersion(database: string): Promise<string> {
  const k = knex({ client: 'pg', connection: { ...pgConnection, database } });
  try {
    return (
      (await k.raw<{ rows: { v: string }[] }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ??
      '?'
    );
  } finally {
    await k.destroy();
  }
}

/** The service, the library reference and the limit: the same bare server checking tokens with node:crypto. */
const SERVERS: { key: LimitKey; name: string; script: string; extra: Record<string, string> }[] = [
  { key: 'service', name: 'the service', script: 'service/src/main.ts', extra: {} },
  {
    key: 'reference',
    name: 'library reference (jsonwebtoken)',
    script: 'tools/bench/reference.ts',
    extra: {},
  },
  {
    key: 'limit',
    name: 'limit (node:crypto)',
    script: 'tools/bench/reference.ts',
    extra: { REFERENCE_VERIFIER: 'crypto' },
  },
];

/** One round's figures added to the series of its server, list and connection count. */
function addRound(
  series: LimitSeries[],
  at: { key: LimitKey; list: MeasuredList; connections: number },
  f: EndpointFigures,
): void {
  const { key, list, connections } = at;
  let s = series.find((x) => x.key === key && x.list === list.list && x.connections === connections);
  if (!s) {
    s = {
      key,
      list: list.list,
      signedIn: list.signedIn,
      connections,
      rps: [],
      cpuUs: [],
      p50: [],
      errors: 0,
      non2xx: 0,
    };
    series.push(s);
  }
  s.rps.push(f.rps);
  s.cpuUs.push(f.cpuUsPerRequest ?? Number.NaN);
  s.p50.push(f.p50);
  s.errors += f.errors;
  s.non2xx += f.non2xx;
}

async function main(): Promise<void> {
  const info = await seed(posts, false, log);
  const env = benchServiceEnv(info.database);
  const contenders: Contender[] = [];
  try {
    for (const { key, name, script, extra } of SERVERS) {
      const server = await startServer(script, { ...env, ...extra }, { node: node.path });
      contenders.push({ key, name, server, token: await benchToken(server.base) });
    }
    await sameAnswers(contenders, LISTS);
    log(
      `${info.database}: answers equal; ${String(rounds)} rounds of ${String(duration)} s at ${connectionCounts.join(' and ')} connections`,
    );
    const start = loadAverage();
    const series: LimitSeries[] = [];
    await alternatingRounds(
      contenders,
      LISTS,
      { rounds, connectionCounts, duration, warmup: WARMUP },
      ({ round, connections, list, contender, figures: f }) => {
        const key = contender.key as LimitKey;
        addRound(series, { key, list, connections }, f);
        log(
          `round ${String(round + 1)}  c=${String(connections).padEnd(3)} ${list.list.padEnd(26)} ${key.padEnd(9)} ${String(f.rps).padStart(6)} req/s  p50 ${String(f.p50)} ms  p99 ${String(f.p99)} ms  errors ${String(f.errors)}  non-2xx ${String(f.non2xx)}  CPU ${String(f.cpuUsPerRequest ?? '?')} µs/req`,
        );
      },
    );
    const result: LimitResult = {
      measuredAt: new Date().toISOString(),
      posts,
      duration,
      rounds,
      ...(note ? { note } : {}),
      machine: {
        cpus: `${String(os.cpus().length)} × ${os.cpus()[0]?.model.trim() ?? '?'}`,
        memoryGb: Math.round(os.totalmem() / 2 ** 30),
        node: node.version,
        postgres: await postgresVersion(info.database),
        loadAverage: { start, end: loadAverage() },
      },
      series,
    };
    log(['', ...limitSection(result)].join('\n'));
  } finally {
    await Promise.all(contenders.map((c) => c.server.stop()));
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause instanceof Error) process.stderr.write(`cause: ${cause.message}\n`);
  process.exit(1);
});
