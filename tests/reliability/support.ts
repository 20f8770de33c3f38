import autocannon from 'autocannon';
import knex, { type Knex } from 'knex';
import { Relay } from '../../tools/harness/relay';
import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { adminDatabase, createScratchDatabase, postgresServer } from '../../tools/harness/postgres';
import {
  startService as startServiceProcess,
  stopAll,
  type LogLine,
  type ServiceProcess,
  type SpawnOptions,
} from '../../tools/harness/service';

import { serviceEnv } from '../../tools/harness/env';
import { pollUntil } from '../../tools/harness/poll';

export { freePort } from '../../tools/harness/service';
export { OwnPostgres } from '../../tools/harness/postgres';
export { TEST_SECRET as SECRET } from '../../tools/harness/env';
export { isProblem } from '../../tools/harness/problem';

/** The PostgreSQL server the suite runs against (tools/harness/postgres.ts). */
export const pg = { ...postgresServer, adminDatabase };

export function connect(database: string, port = pg.port, host = pg.host): Knex {
  return knex({
    client: 'pg',
    connection: { host, port, user: pg.user, password: pg.password, database },
    pool: { min: 0, max: 4 },
  });
}

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

/** Prints one case's figures on their own line, outside jest's console decoration. */
export function report(name: string, figures: Record<string, unknown>): void {
  const parts = Object.entries(figures).map(
    ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`,
  );
  process.stdout.write(`[reliability] ${name}: ${parts.join(' ')}\n`);
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export type { LogLine, ServiceProcess } from '../../tools/harness/service';

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

/** Kills every service process a case left running (by pid, never by name). */
export const stopAllServices = stopAll;

export interface Answer {
  status: number;
  contentType: string;
  /** The Retry-After header, when the answer has one. */
  retryAfter: string | null;
  body: unknown;
  ms: number;
}

/** One request with a hard time-out, so a hanging service fails the case instead of the runner. */
export async function call(
  base: string,
  pathAndQuery: string,
  init: {
    method?: string;
    token?: string;
    json?: unknown;
    form?: Record<string, string>;
    timeoutMs?: number;
  } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  let body: string | undefined;
  if (init.token) headers.Authorization = `Bearer ${init.token}`;
  if (init.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(init.json);
  }
  if (init.form) {
    headers['Content-Type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(init.form).toString();
  }
  const started = performance.now();
  const res = await fetch(`${base}${pathAndQuery}`, {
    method: init.method ?? (body === undefined ? 'GET' : 'POST'),
    headers,
    body,
    signal: AbortSignal.timeout(init.timeoutMs ?? 30_000),
  });
  const text = await res.text();
  const contentType = res.headers.get('content-type') ?? '';
  let parsed: unknown = text;
  if (contentType.includes('json') && text !== '') parsed = JSON.parse(text);
  return {
    status: res.status,
    contentType,
    retryAfter: res.headers.get('retry-after'),
    body: parsed,
    ms: performance.now() - started,
  };
}

/** "201x40,503x12": how many answers had each status. */
export const statusCounts = (answers: { status: number }[]): string =>
  Object.entries(
    answers.reduce<Record<number, number>>(
      (acc, a) => ({ ...acc, [a.status]: (acc[a.status] ?? 0) + 1 }),
      {},
    ),
  )
    .map(([s, n]) => `${s}x${String(n)}`)
    .join(',');

/** Registers and logs in through the API; returns the token. */
export async function account(
  base: string,
  email: string,
  password = 'correct horse battery',
): Promise<string> {
  const created = await call(base, '/users/', { json: { email, password } });
  if (created.status !== 201) throw new Error(`register ${email}: ${created.status}`);
  const login = await call(base, '/login', { form: { username: email, password } });
  if (login.status !== 200) throw new Error(`login ${email}: ${login.status}`);
  return (login.body as { access_token: string }).access_token;
}

/** Registers and logs in `email` through the API, then publishes `count` posts as it. */
export async function author(
  base: string,
  email: string,
  count: number,
): Promise<{ token: string; posts: number[] }> {
  const token = await account(base, email);
  const posts: number[] = [];
  for (let i = 0; i < count; i++) {
    const res = await call(base, '/posts/', { token, json: { title: `post ${i}`, content: 'content' } });
    if (res.status !== 201) throw new Error(`create post: ${res.status}`);
    posts.push((res.body as { id: number }).id);
  }
  return { token, posts };
}

/** Polls until the path answers with the status or the time runs out; returns the last status. */
export async function waitForStatus(
  base: string,
  p: string,
  status: number,
  withinMs: number,
): Promise<number> {
  const polled = await pollUntil(
    // No answer at all (refused, timed out) counts as status 0.
    () =>
      call(base, p, { timeoutMs: 2000 }).then(
        (a) => a.status,
        () => 0,
      ),
    (got) => got === status,
    { withinMs, everyMs: 50 },
  );
  return polled.value;
}

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
 * A primary with a synchronous standby and, in front of it, a relay standing in for the -rw
 * Service, made before this file's cases and removed after them; `start` runs the service on the
 * relay's address with the given statement time-out.
 */
export function replicatedBehindRelay(): {
  pair: ReplicatedPostgres;
  relay: () => Relay;
  start: (statementTimeoutMs: number) => Promise<ServiceProcess>;
} {
  const pair = new ReplicatedPostgres();
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
      startService({
        DB_HOSTNAME: '127.0.0.1',
        DB_PORT: String(started().port),
        DB_NAME: 'postgres',
        DB_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs),
      }),
  };
}
