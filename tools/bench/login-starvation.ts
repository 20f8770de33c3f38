/**
 * Whether failed logins slow unrelated requests: bcrypt runs on libuv's threadpool,
 * which request decompression (zlib) shares. For each PASSWORD_HASH_CONCURRENCY given (64 stands
 * for "no bound", as before it existed; 2 is the default), a server on a seeded database is
 * measured quiet and then while 8 clients send failed logins back to back: the p50 of a
 * gzip-bodied POST /posts/ and of a valid login, and of the failed logins themselves (which must
 * cost what a valid one does). Sequential probes, so each figure is one request's own time.
 *
 *   npm run bench:login -- [--posts 10000] [--seconds 15] [--concurrency 64,2]
 *
 * Prints the figures as a Markdown table (tools/bench/login-report.ts).
 */
import { gzipSync } from 'node:zlib';
import { loginSection, type LoginResult, type LoginRound } from './login-report';
import { loadAverage, log, numbers, option, runMain } from './common';
import { startServer } from './measure';
import { benchToken } from './rounds';
import { call, p50 } from '../harness/client';
import { knexTo } from '../harness/postgres';
import { BENCH_PASSWORD, benchServiceEnv, seed } from '../harness/seed';

const POSTS = Number(option('posts', '10000'));
const SECONDS = Number(option('seconds', '15'));
const VARIANTS = numbers('concurrency', '64,2');
const ATTACKERS = 8;

const roundedP50 = (values: number[]): number => Math.round(p50(values));

/** A login form, as call() sends it. */
const login = (username: string, password: string) => ({ form: { username, password } });

/** Runs the probes (and the failed-login clients, when `attack`) for SECONDS; their figures. The posts made go into `written`. */
async function round(base: string, token: string, attack: boolean, written: number[]): Promise<LoginRound> {
  const gzipPost = {
    token,
    body: gzipSync(JSON.stringify({ title: 'gzip-bodied post', content: 'x'.repeat(2000) })),
    headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' },
  };
  const figures = { gzip: [] as number[], valid: [] as number[], failed: [] as number[] };
  const unexpected: string[] = [];
  const until = Date.now() + SECONDS * 1000;
  const loop = async (into: number[], path: string, init: Parameters<typeof call>[2], expected: number) => {
    while (Date.now() < until) {
      const { status, ms, body } = await call(base, path, init);
      if (status !== expected) unexpected.push(`${base}${path} ${String(status)}`);
      const created = status === 201 ? (body as { id?: number }).id : undefined;
      if (created !== undefined) written.push(created);
      into.push(ms);
    }
  };
  await Promise.all([
    loop(figures.gzip, '/posts/', gzipPost, 201),
    loop(figures.valid, '/login', login('user1@bench.example', BENCH_PASSWORD), 200),
    ...Array.from({ length: attack ? ATTACKERS : 0 }, (_, n) =>
      loop(figures.failed, '/login', login(`user${String(n + 2)}@bench.example`, 'wrong-password'), 403),
    ),
  ]);
  if (unexpected.length > 0) throw new Error(`unexpected answers: ${unexpected.slice(0, 5).join(', ')}`);
  return {
    gzipPostP50: roundedP50(figures.gzip),
    validLoginP50: roundedP50(figures.valid),
    ...(attack ? { failedLoginP50: roundedP50(figures.failed) } : {}),
    requests: {
      gzipPosts: figures.gzip.length,
      validLogins: figures.valid.length,
      failedLogins: figures.failed.length,
    },
  };
}

/** Each PASSWORD_HASH_CONCURRENCY in turn: a server of its own, measured quiet and then attacked. */
async function measureEach(
  database: string,
  results: LoginResult['results'],
  written: number[],
): Promise<void> {
  for (const concurrency of VARIANTS) {
    const server = await startServer(
      'service/src/main.ts',
      { ...benchServiceEnv(database), PASSWORD_HASH_CONCURRENCY: String(concurrency) },
      { node: process.execPath },
    );
    try {
      const token = await benchToken(server.base);
      const quiet = await round(server.base, token, false, written);
      const attacked = await round(server.base, token, true, written);
      results.push({ concurrency, quiet, attacked });
      log(`PASSWORD_HASH_CONCURRENCY=${String(concurrency)}: ${JSON.stringify({ quiet, attacked })}`);
    } finally {
      await server.stop();
    }
  }
}

/**
 * The posts the probes made, deleted: the seeded database is left as it was found, so the next
 * bench on it measures the seeded lists rather than pages of these long posts (and needs no reseed).
 */
async function removePosts(database: string, ids: number[]): Promise<void> {
  const k = knexTo(database, 1);
  try {
    await k('posts').whereRaw('id = ANY(?)', [ids]).delete();
  } finally {
    await k.destroy();
  }
}

async function main(): Promise<void> {
  const seeded = await seed(POSTS, false, log);
  const results: LoginResult['results'] = [];
  const written: number[] = [];
  try {
    await measureEach(seeded.database, results, written);
  } finally {
    await removePosts(seeded.database, written);
  }
  const result: LoginResult = {
    measuredAt: new Date().toISOString(),
    posts: POSTS,
    seconds: SECONDS,
    attackers: ATTACKERS,
    bcryptRounds: Number(benchServiceEnv(seeded.database).BCRYPT_ROUNDS),
    node: process.version,
    loadAverage: loadAverage(),
    results,
  };
  log(['', ...loginSection(result)].join('\n'));
}

runMain(main);
