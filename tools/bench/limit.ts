/**
 * `npm run bench:limit -- [--posts 100000] [--rounds 7] [--duration 4] [--connections 10,64] [--note TEXT] [--node image|current|PATH]`
 *
 * The service's lists against the physical limit: tools/bench/reference.ts with REFERENCE_VERIFIER=crypto
 * (bare node:http + pg, the service's own statements, the token checked with node:crypto alone),
 * beside the library reference (the same server checking with jsonwebtoken). The answers are
 * compared first; then alternating rounds (tools/bench/rounds.ts). Prints each list's service / limit
 * and service / reference, median and spread of the rounds, at each count, as Markdown tables.
 */
import { loadAverage, machine } from './common';
import { limitSection, type LimitResult } from './limit-report';
import { startServer } from './measure';
import { serverNode } from './node';
import {
  alternatingRounds,
  benchToken,
  option,
  sameAnswers,
  type Contender,
  type MeasuredList,
} from './rounds';
import { benchServiceEnv, COMMON_WORD, seed } from '../harness/seed';

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

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause instanceof Error) process.stderr.write(`cause: ${cause.message}\n`);
  process.exit(1);
});
