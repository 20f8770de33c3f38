/**
 * `npm run bench:limit -- [--posts 100000] [--rounds 7] [--duration 4] [--connections 10,64] [--note TEXT] [--node image|current|PATH]`
 *
 * The service's lists against the physical limit: tools/bench/reference.ts with REFERENCE_VERIFIER=crypto
 * (bare node:http + pg, the service's own statements, the token checked with node:crypto alone),
 * beside the library reference (the same server checking with jsonwebtoken). The answers are
 * compared first; then alternating rounds (tools/bench/rounds.ts). Prints each list's service / limit
 * and service / reference, median and spread of the rounds, at each count, as Markdown tables.
 */
import { loadAverage, log, machine, numbers, option, runMain, SIZES, usage } from './common';
import { limitSection, type LimitResult } from './limit-report';
import { startServer } from './measure';
import { serverNode } from './node';
import { alternatingRounds, benchToken, sameAnswers, type Contender, type MeasuredList } from './rounds';
import { benchServiceEnv, COMMON_WORD, seed } from '../harness/seed';

const WARMUP = 1;
const posts = Number(option('posts', '100000'));
const rounds = Number(option('rounds', '7'));
const duration = Number(option('duration', '4'));
const connectionCounts = numbers('connections', '10,64');
const note = option('note', '');
const node = serverNode(option('node', 'image'));
usage(
  SIZES.includes(posts) &&
    Number.isInteger(rounds) &&
    rounds >= 1 &&
    duration >= 1 &&
    connectionCounts.every((c) => Number.isInteger(c) && c >= 1),
  '--posts takes 10000, 100000 or 1000000; --rounds a whole number ≥ 1; --duration at least 1; --connections positive whole numbers, comma-separated',
);

const LISTS: MeasuredList[] = [
  { list: 'public list', path: '/posts/public', signedIn: false },
  { list: 'signed-in list', path: '/posts/', signedIn: true },
  { list: `signed-in search ("${COMMON_WORD}")`, path: `/posts/?search=${COMMON_WORD}`, signedIn: true },
];

/** The service, the library reference and the limit: the same bare server checking tokens with node:crypto. */
const SERVERS: { key: string; name: string; script: string; extra: Record<string, string> }[] = [
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
    const loadAverageAtStart = loadAverage();
    const series = await alternatingRounds(contenders, LISTS, {
      rounds,
      connectionCounts,
      duration,
      warmup: WARMUP,
    });
    const result: LimitResult = {
      measuredAt: new Date().toISOString(),
      posts,
      duration,
      rounds,
      ...(note ? { note } : {}),
      machine: await machine(node.version),
      loadAverageAtStart,
      series,
    };
    log(['', ...limitSection(result)].join('\n'));
  } finally {
    await Promise.all(contenders.map((c) => c.server.stop()));
  }
}

runMain(main);
