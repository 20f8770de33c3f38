import autocannon from 'autocannon';
import type { Knex } from 'knex';
import { account, call, sleep, type Answer } from '../../tools/harness/client';
import { isProblem } from '../../tools/harness/problem';
import { Relay } from '../../tools/harness/relay';
import { untilStopped, type Body } from '../../tools/harness/traffic';
import { ReplicatedPostgres, type ReplicatedOptions } from '../../tools/harness/replicated-postgres';
import { adminDatabase, createScratchDatabase, knexTo, postgresServer } from '../../tools/harness/postgres';
import {
  startService as startServiceProcess,
  stopAll,
  type LogLine,
  type ServiceProcess,
  type SpawnOptions,
} from '../../tools/harness/service';

import { serviceEnv } from '../../tools/harness/env';

export { stopAll as stopAllServices } from '../../tools/harness/service';
export type { LogLine, ServiceProcess } from '../../tools/harness/service';
export { countOf, OwnPostgres } from '../../tools/harness/postgres';
export { TEST_SECRET as SECRET } from '../../tools/harness/env';
export { isProblem } from '../../tools/harness/problem';
export { untilStopped } from '../../tools/harness/traffic';
export {
  ACCOUNT_PASSWORD,
  account,
  author,
  call,
  p50,
  sleep,
  statusCounts,
  countBy,
  vote,
  waitForStatus,
  type Answer,
} from '../../tools/harness/client';

/** The PostgreSQL server the suite runs against (tools/harness/postgres.ts). */
export const pg = { ...postgresServer, adminDatabase };

export const connect = (database: string, port = pg.port, host = pg.host): Knex =>
  knexTo(database, 4, { ...postgresServer, host, port });

/** A fresh database for one case, dropped (with any connection left on it) afterwards. */
export const createDatabase = (label: string) => createScratchDatabase(`sp_rel_${label}`);

/**
 * A fresh database for this test file and a connection to it, made before its cases and, after
 * them, dropped once every service the file started is stopped.
 */
export function scratchDatabase(label: string): { readonly name: string; readonly db: Knex } {
  let database: { name: string; drop(): Promise<void> } | undefined;
  let db: Knex | undefined;
  beforeAll(async () => {
    database = await createDatabase(label);
    db = connect(database.name);
  });
  afterAll(async () => {
    await stopAll();
    await db?.destroy();
    await database?.drop();
  });
  const ready = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the scratch database exists only while the cases run');
    return value;
  };
  return {
    get name() {
      return ready(database).name;
    },
    get db() {
      return ready(db);
    },
  };
}

/** Runs `use` while a transaction of the test holds posts in ACCESS EXCLUSIVE mode, so every query on it waits. */
export async function whilePostsLocked<T>(db: Knex, use: () => Promise<T>): Promise<T> {
  const lock = await db.transaction();
  try {
    await lock.raw('LOCK TABLE posts IN ACCESS EXCLUSIVE MODE');
    return await use();
  } finally {
    await lock.rollback();
  }
}

/** Prints one case's figures on their own line, outside jest's console decoration. */
export function report(name: string, figures: Record<string, unknown>): void {
  const parts = Object.entries(figures).map(
    ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`,
  );
  process.stdout.write(`[reliability] ${name}: ${parts.join(' ')}\n`);
}

/** Only the lines that matter are kept, so a long load cannot fill memory. */
const LIFECYCLE = /listening on|shutdown|closing the listener|migrat|another replica/;
const notable = (line: LogLine): boolean => (line.level ?? 0) >= 40 || LIFECYCLE.test(line.msg ?? '');

/** The service as operators run it (its own process, real signals, real exit codes), on this suite's PostgreSQL. */
export function startService(
  env: Record<string, string>,
  withinMs = 90_000,
  options: Pick<SpawnOptions, 'memoryLimitBytes'> = {},
): Promise<ServiceProcess> {
  const childEnv = serviceEnv({ PORT: '0', LOG_LEVEL: 'info', ...env }, 'postgres');
  // The port is read from the info-level "listening" line.
  if (childEnv.LOG_LEVEL !== 'info' && childEnv.LOG_LEVEL !== 'debug') childEnv.LOG_LEVEL = 'info';
  return startServiceProcess(childEnv, { ...options, keep: notable, withinMs });
}

/** The service on `database` of a server, relay or pooler of the test's own at 127.0.0.1:`port`. */
export const startOn = (port: number, database: string, env: Record<string, string> = {}) =>
  startService({ DB_HOSTNAME: '127.0.0.1', DB_PORT: String(port), DB_NAME: database, ...env });

export interface LoadRecord {
  result: Promise<autocannon.Result>;
  /** Arrival time of every response, to tell what happened before and after a moment. */
  responses: number[];
  /** Responses whose status was not the expected one, at any time. */
  unexpected: { at: number; status: number }[];
  /** Transport errors (refused, reset, timed out), with their time. */
  errors: { at: number; message: string }[];
  stop(): Promise<autocannon.Result>;
}

/** Runs autocannon until stopped, keeping a timed record of every answer and error. */
export function load(options: autocannon.Options, expected: number): LoadRecord {
  const record: Omit<LoadRecord, 'result' | 'stop'> = { responses: [], unexpected: [], errors: [] };
  let instance: autocannon.Instance | undefined;
  const result = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon({ duration: 300, ...options }, (error: unknown, res) => {
      if (error) reject(error instanceof Error ? error : new Error('autocannon failed'));
      else resolve(res);
    });
  });
  if (!instance) throw new Error('autocannon did not start');
  const started = instance;
  started.on('response', (_client, status) => {
    const at = Date.now();
    record.responses.push(at);
    if (status !== expected && record.unexpected.length < 1000) record.unexpected.push({ at, status });
  });
  started.on('reqError', (error: unknown) => {
    if (record.errors.length < 10_000)
      record.errors.push({ at: Date.now(), message: error instanceof Error ? error.message : String(error) });
  });
  return {
    ...record,
    result,
    stop: () => {
      started.stop();
      return result;
    },
  };
}

/**
 * A primary with a synchronous standby (more with `options.standbys`) and, in front of it, a relay
 * standing in for the -rw Service, made before this file's cases and removed after them; `start`
 * runs the service on the relay's address with the given statement time-out.
 */
export function replicatedBehindRelay(options: ReplicatedOptions = {}): {
  pair: ReplicatedPostgres;
  relay: () => Relay;
  start: (statementTimeoutMs: number) => Promise<ServiceProcess>;
} {
  const pair = new ReplicatedPostgres(options);
  let relay: Relay | undefined;
  beforeAll(async () => {
    await pair.init();
    relay = new Relay(pair.primaryPort);
    await relay.start();
  });
  afterAll(async () => {
    await stopAll();
    await relay?.close();
    pair.destroy();
  });
  const started = (): Relay => {
    if (!relay) throw new Error('the relay exists only while the cases run');
    return relay;
  };
  return {
    pair,
    relay: started,
    start: (statementTimeoutMs) =>
      startOn(started().port, 'postgres', { DB_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs) }),
  };
}

/** Runs the bodies as untilStopped does for `ms`, then stops them: what failed. */
export async function whileRunning(ms: number, bodies: Body[]): Promise<string[]> {
  const run = untilStopped(bodies);
  await sleep(ms);
  await run.stop();
  return run.failures;
}

/** Each answer is a success or a 503 problem, and came within the request budget. */
export function expectWithinBudget(
  answers: { status: number; problem: boolean; ms: number }[],
  budgetMs: number,
) {
  for (const a of answers) {
    expect([200, 201, 503]).toContain(a.status);
    if (a.status === 503) expect(a.problem).toBe(true);
    expect(a.ms).toBeLessThan(budgetMs);
  }
}

/** Which of the acknowledged posts a server of the cluster holds. */
export async function storedOn(cluster: ReplicatedPostgres, port: number, ids: number[]): Promise<number[]> {
  const rows = await cluster.query<{ id: number }>(port, 'SELECT id FROM posts WHERE id = ANY($1::int[])', [
    ids,
  ]);
  return rows.map((r) => r.id);
}

/** Every acknowledged write is stored: the same posts, in whatever order. */
export function expectAllStored(stored: number[], acknowledged: number[]): void {
  expect([...stored].sort((a, b) => a - b)).toEqual([...acknowledged].sort((a, b) => a - b));
}

/** The service on a primary and its standbys (DB_READ_HOSTNAME), with `writers` accounts and a first page. */
export interface ReadingSetup {
  primary: number;
  standbys: number[];
  database: string;
  maxLagMs: number;
  statementTimeoutMs: number;
  /** Names the writers' accounts. */
  label: string;
  writers: number;
  page: number;
}

/** Two API processes of the setup, the writers' tokens, and `page` posts to read from the start. */
export async function readingApis(
  setup: ReadingSetup,
): Promise<{ apis: ServiceProcess[]; tokens: string[] }> {
  const env = {
    DB_HOSTNAME: '127.0.0.1',
    DB_PORT: String(setup.primary),
    DB_NAME: setup.database,
    DB_READ_HOSTNAME: setup.standbys.map((port) => `127.0.0.1:${String(port)}`).join(','),
    DB_READ_MAX_LAG_MS: String(setup.maxLagMs),
    DB_STATEMENT_TIMEOUT_MS: String(setup.statementTimeoutMs),
    BCRYPT_ROUNDS: '4',
  };
  const first = await startService(env);
  // The second once the first has migrated: they would only queue on the migration lock.
  const apis = [first, await startService(env)];
  const tokens: string[] = [];
  for (let w = 0; w < setup.writers; w++)
    tokens.push(await account(first.base, `${setup.label}-writer${String(w)}@example.com`));
  for (let i = 0; i < setup.page; i++)
    await call(first.base, '/posts/', {
      token: tokens[0],
      json: { title: `seed ${String(i)}`, content: 'c' },
    });
  return { apis, tokens };
}

/** One answer of the read-back traffic: sent at `sentAt`, answered at `at` (ms since the epoch). */
export interface ReadBackAnswer {
  kind: 'write' | 'read-back' | 'anonymous';
  status: number;
  problem: boolean;
  ms: number;
  sentAt: number;
  at: number;
  /** A write's acknowledged post (with when the database made it), or the post a read-back looked for. */
  id?: number;
  createdAt?: number;
  /** Whether a read-back found its writer's post. */
  found?: boolean;
  /** When the newest post of an anonymous page was made. */
  newest?: number;
}

/** Writers post through one process and read it back at once through the other; readers read the feed. */
export function readBackTraffic(
  apis: ServiceProcess[],
  tokens: string[],
  { readers, page, pairs = Infinity }: { readers: number; page: number; pairs?: number },
) {
  const answers: ReadBackAnswer[] = [];
  let readBacks = 0;
  const base = (i: number) => (apis[i % apis.length] as ServiceProcess).base;
  const record = (
    kind: ReadBackAnswer['kind'],
    sentAt: number,
    a: Answer,
    extra: Partial<ReadBackAnswer> = {},
  ) => {
    answers.push({
      kind,
      status: a.status,
      problem: isProblem(a),
      ms: a.ms,
      sentAt,
      at: Date.now(),
      ...extra,
    });
  };
  const writer = (w: number, token: string) => async (i: number) => {
    // A word of its own that the title index serves (no other title holds it).
    const title = `rw${String(w)}n${String(i)}q`;
    let sentAt = Date.now();
    const created = await call(base(w + i), '/posts/', { token, json: { title, content: 'c' } });
    if (created.status !== 201) {
      record('write', sentAt, created);
      await sleep(50);
      return;
    }
    const post = created.body as { id: number; created_at: string };
    record('write', sentAt, created, { id: post.id, createdAt: Date.parse(post.created_at) });
    sentAt = Date.now();
    const read = await call(base(w + i + 1), `/posts/public?search=${encodeURIComponent(title)}`, { token });
    readBacks++;
    const found = read.status === 200 && (read.body as { id: number }[]).some((p) => p.id === post.id);
    record('read-back', sentAt, read, { id: post.id, found });
  };
  const reader = (r: number) => async (i: number) => {
    const sentAt = Date.now();
    const answer = await call(base(r + i), `/posts/public?limit=${String(page)}`);
    const newest = answer.status === 200 ? (answer.body as { created_at: string }[])[0] : undefined;
    record('anonymous', sentAt, answer, newest ? { newest: Date.parse(newest.created_at) } : {});
  };
  const run = untilStopped(
    [...tokens.map((token, w) => writer(w, token)), ...Array.from({ length: readers }, (_, r) => reader(r))],
    () => readBacks < pairs,
  );
  // The answers of one kind so far, as each case reads them apart.
  const of = (kind: ReadBackAnswer['kind']) => answers.filter((a) => a.kind === kind);
  return { ...run, answers, of, readBacks: () => readBacks };
}
