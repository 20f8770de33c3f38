import autocannon from 'autocannon';
import knex, { type Knex } from 'knex';
import { Relay } from '../../tools/harness/relay';
import { ReplicatedPostgres, type ReplicatedOptions } from '../../tools/harness/replicated-postgres';
import { adminDatabase, createScratchDatabase, postgresServer } from '../../tools/harness/postgres';
import {
  startService as startServiceProcess,
  stopAll,
  type LogLine,
  type ServiceProcess,
  type SpawnOptions,
} from '../../tools/harness/service';

import { serviceEnv } from '../../tools/harness/env';

export { freePort } from '../../tools/harness/service';
export { OwnPostgres } from '../../tools/harness/postgres';
export { TEST_SECRET as SECRET } from '../../tools/harness/env';
export { isProblem } from '../../tools/harness/problem';
export {
  account,
  author,
  call,
  p50,
  sleep,
  statusCounts,
  waitForStatus,
  type Answer,
} from '../../tools/harness/client';

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
      startService({
        DB_HOSTNAME: '127.0.0.1',
        DB_PORT: String(started().port),
        DB_NAME: 'postgres',
        DB_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs),
      }),
  };
}
