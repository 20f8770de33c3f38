/**
 * `npm run bench:pooler -- [--posts 100000] [--duration 6] [--rounds 5] [--connections 10,64] [--only KEY,…] [--pgbouncer-settings k=v,…] [--before REF] [--node image|current|PATH]`
 *
 * The lists (public, authenticated, and the public list with a search) served by the bare
 * reference (tools/bench/reference.ts: the service's own statements, prepared per shape, the caller
 * looked up per request, the same pool), by the service direct to PostgreSQL and behind PgBouncer
 * 1.24 in transaction mode (prepared statements tracked, its default; and with
 * DB_PREPARED_STATEMENTS=false), and with `--before` by another commit's service (git worktree),
 * direct: what the framework costs, what the pooler costs, what a change costs. Every server runs at once on the same seeded database; each round measures
 * them one after the other, in an order that turns each round, so a disturbance of the machine
 * lands on all of them. Prints the median and spread of the rounds and the ratios as Markdown tables.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import knex from 'knex';
import { log, machine, numbers, option, postgresSetting, runMain, SIZES, usage } from './common';
import { cpuMsOf, startServer } from './measure';
import { serverNode } from './node';
import { CpuSplit } from './cpu-split';
import { POOLER_CPU, poolerSection, type PoolerResult } from './pooler-report';
import {
  alternatingRounds,
  benchToken as token,
  sameAnswers,
  type Contender,
  type MeasuredList,
  type Series,
} from './rounds';
import { benchServiceEnv, COMMON_WORD, pgConnection, seed } from '../harness/seed';
import { migrations } from '../../migrations';
import { OwnPgBouncer } from '../harness/pgbouncer';
import { ROOT } from '../harness/service';

/** The service's pool, and the pooler's server pool: the same number of server connections. */
const POOL = 10;
const WARMUP = 1;

const posts = Number(option('posts', '100000'));
// Short rounds, several of them: a ratio is taken within a round (pooler-report.ts), and this
// shared host's speed drifts over minutes.
const duration = Number(option('duration', '6'));
const rounds = Number(option('rounds', '5'));
const connectionCounts = numbers('connections', '10,64');
const before = option('before', '');
/**
 * With a number: one more contender, `pgbouncer-wide`, the service behind PgBouncer with this many
 * client connections (DB_POOL_MAX) on the same server pool: connections to the pooler are cheap, and
 * more of them keep queries waiting in PgBouncer rather than in the service while the hop adds latency.
 */
const widePool = Number(option('pooler-client-pool', '0'));
/** Only these contenders (reference, direct, pgbouncer, pgbouncer-unnamed, pgbouncer-wide, before). */
const only = option('only', '')
  .split(',')
  .map((s) => s.trim())
  .filter(Boolean);
const wanted = (key: string) => only.length === 0 || only.includes(key);
/** More PgBouncer settings (pkt_buf=16384, say), to try one before a chart's Pooler carries it. */
const pgbouncerSettings = Object.fromEntries(
  option('pgbouncer-settings', '')
    .split(',')
    .filter((pair) => pair.includes('='))
    .map((pair) => pair.split('=', 2).map((part) => part.trim()) as [string, string]),
);
/**
 * Cores of CPU for PgBouncer alone, the rest for everything else (tools/bench/cpu-split.ts): the pooler
 * as it runs in a cluster, on CPU of its own. Unset, everything shares the machine.
 */
const poolerCpu = option('pooler-cpu', '');
const node = serverNode(option('node', 'image'));
usage(
  SIZES.includes(posts) && rounds >= 1 && duration >= 1 && Number.isInteger(widePool) && widePool >= 0,
  '--posts takes 10000, 100000 or 1000000; --rounds and --duration at least 1; --pooler-client-pool a whole number',
);

/** Another commit's checkout beside this one, sharing its node_modules; removed afterwards. */
function worktree(ref: string): { dir: string; commit: string; remove(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sp-bench-before-'));
  rmSync(dir, { recursive: true });
  execFileSync('git', ['worktree', 'add', '--detach', dir, ref], { cwd: ROOT, stdio: 'pipe' });
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: dir, encoding: 'utf8' }).trim();
  return {
    dir,
    commit,
    remove: () => {
      execFileSync('git', ['worktree', 'remove', '--force', dir], { cwd: ROOT, stdio: 'pipe' });
    },
  };
}

/**
 * A copy of the bench database with the schema an older checkout knows: the migrations it does
 * not list are undone (newest first), so its service starts on the same data. Replaced each run.
 */
async function schemaAsOf(database: string, checkoutDir: string): Promise<string> {
  const copy = `${database}_before`;
  const admin = knex({ client: 'pg', connection: { ...pgConnection, database: 'postgres' } });
  try {
    await admin.raw(`DROP DATABASE IF EXISTS "${copy}" WITH (FORCE)`);
    await admin.raw(`CREATE DATABASE "${copy}" TEMPLATE "${database}"`);
  } finally {
    await admin.destroy();
  }
  const known = readFileSync(path.join(checkoutDir, 'migrations', 'index.ts'), 'utf8');
  const k = knex({ client: 'pg', connection: { ...pgConnection, database: copy } });
  try {
    for (const [name, migration] of Object.entries(migrations).reverse()) {
      if (known.includes(`'${name}'`)) continue;
      await migration.down?.(k);
      await k('knex_migrations').where({ name }).delete();
    }
  } finally {
    await k.destroy();
  }
  return copy;
}

/** The lists every contender must answer alike, then is measured on. */
const LISTS: MeasuredList[] = [
  { list: 'public list', path: '/posts/public', signedIn: false },
  { list: 'authenticated list', path: '/posts/', signedIn: true },
  {
    list: `public search ("${COMMON_WORD}")`,
    path: `/posts/public?search=${COMMON_WORD}`,
    signedIn: false,
  },
];

/** PgBouncer on the bench's server pool; with `--pooler-cpu`, on CPU of its own (the split undone if it fails). */
async function startPooler(
  database: string,
): Promise<{ bouncer: OwnPgBouncer; split: CpuSplit | undefined }> {
  const bouncer = new OwnPgBouncer({
    version: '1.24',
    target: { host: pgConnection.host, port: pgConnection.port },
    poolSize: POOL,
    overrides: { settings: pgbouncerSettings },
  });
  const split = poolerCpu ? new CpuSplit(Number(poolerCpu)) : undefined;
  try {
    split?.enterRest(await postgresSetting('data_directory', database));
    await bouncer.start();
    if (split && bouncer.pid !== undefined) split.placePooler(bouncer.pid);
  } catch (error) {
    split?.restore();
    throw error;
  }
  return { bouncer, split };
}

/**
 * Starts each contender `--only` wants into `contenders`, so the caller stops every one started
 * even when a later one fails; `older` is the `--before` checkout and its copy of the database.
 */
async function startContenders(
  contenders: Contender[],
  env: Record<string, string>,
  bouncer: OwnPgBouncer,
  older: { dir: string; commit: string; database: string | undefined } | undefined,
): Promise<void> {
  const viaBouncer = { DB_HOSTNAME: '127.0.0.1', DB_PORT: String(bouncer.port) };
  const add = async (key: string, name: string, extra: Record<string, string>, cwd?: string) => {
    if (!wanted(key)) return;
    const server = await startServer('service/src/main.ts', { ...env, ...extra }, { node: node.path, cwd });
    contenders.push({ key, name, server, token: await token(server.base) });
  };
  if (wanted('reference')) {
    const reference = await startServer('tools/bench/reference.ts', env, { node: node.path });
    contenders.push({
      key: 'reference',
      name: "bare node:http + pg: the service's statements, prepared per shape, the caller looked up per request, the same pool",
      server: reference,
      token: await token(reference.base),
    });
  }
  await add('direct', 'the service, direct to PostgreSQL', {});
  await add('pgbouncer', `${bouncer.version} (transaction mode), prepared statements`, viaBouncer);
  if (widePool > 0)
    await add(
      'pgbouncer-wide',
      `${bouncer.version}, prepared statements, the service's pool ${String(widePool)}`,
      {
        ...viaBouncer,
        DB_POOL_MAX: String(widePool),
      },
    );
  await add('pgbouncer-unnamed', `${bouncer.version}, DB_PREPARED_STATEMENTS=false`, {
    ...viaBouncer,
    DB_PREPARED_STATEMENTS: 'false',
  });
  if (older)
    await add(
      'before',
      `before: ${older.commit}, direct to PostgreSQL`,
      older.database ? { DB_NAME: older.database } : {},
      older.dir,
    );
}

/** The answers compared, then the alternating rounds: each contender's figures on each list at each count. */
async function measureRounds(contenders: Contender[], bouncer: OwnPgBouncer): Promise<Series[]> {
  await sameAnswers(contenders, LISTS);
  // The pooler's own CPU over each measured run, where it serves the contender.
  let poolerBefore: number | undefined;
  return alternatingRounds(
    contenders,
    LISTS,
    { rounds, connectionCounts, duration, warmup: WARMUP },
    {
      beforeRun: (c) => {
        poolerBefore = c.key.startsWith('pgbouncer') ? cpuMsOf(bouncer.pid) : undefined;
      },
      afterRun: ({ figures: f }): Record<string, number> => {
        const poolerAfter = poolerBefore === undefined ? undefined : cpuMsOf(bouncer.pid);
        if (poolerBefore === undefined || poolerAfter === undefined || f.requests === 0) return {};
        return { [POOLER_CPU]: Math.round(((poolerAfter - poolerBefore) * 1000) / f.requests) };
      },
    },
  );
}

async function main(): Promise<void> {
  const info = await seed(posts, false, log);
  const env = { ...benchServiceEnv(info.database), DB_POOL_MAX: String(POOL) };
  const { bouncer, split } = await startPooler(info.database);
  const checkout = before ? worktree(before) : undefined;
  // Copied before any server connects: a template must have no other session.
  const beforeDatabase = checkout ? await schemaAsOf(info.database, checkout.dir) : undefined;
  const contenders: Contender[] = [];
  try {
    await startContenders(contenders, env, bouncer, checkout && { ...checkout, database: beforeDatabase });
    const series = await measureRounds(contenders, bouncer);
    const result: PoolerResult = {
      measuredAt: new Date().toISOString(),
      posts,
      duration,
      rounds,
      pool: POOL,
      machine: await machine(node.version),
      pgbouncer: bouncer.version,
      ...(split ? { cpuSplit: split.shares } : {}),
      series,
    };
    log(['', ...poolerSection(result)].join('\n'));
  } finally {
    await Promise.all(contenders.map((c) => c.server.stop()));
    await bouncer.destroy();
    checkout?.remove();
    split?.restore();
  }
}

runMain(main);
