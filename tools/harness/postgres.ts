/**
 * The PostgreSQL server the suites share, scratch databases on it, and clusters of a test's own
 * (reliability's database-loss case, k8s-tests/local's stand-in for the chart's PostgreSQL): where
 * the server binaries are, and initdb/pg_ctl run as the postgres user, because initdb refuses to
 * run as root.
 */
import { execFileSync, type ExecFileSyncOptions } from 'node:child_process';
import {
  appendFileSync,
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import knex, { type Knex } from 'knex';
import { Client } from 'pg';
import { loadSettings } from '../../service/src/settings';
import { freePort } from './service';

/** The service's own defaults for DB_* (service/src/settings.ts), where a variable is not set. */
const defaults = loadSettings({}).db;

/**
 * The PostgreSQL server the suites run against (service tests on PostgreSQL, reliability, bench):
 * the DB_* variables the service reads, else the local one on 127.0.0.1:5432 as postgres.
 */
export const postgresServer = {
  // Unset means the embedded database to the service; the suites' server is then the local one.
  host: process.env.DB_HOSTNAME ?? '127.0.0.1',
  port: Number(process.env.DB_PORT ?? defaults.port),
  user: process.env.DB_USERNAME ?? defaults.username,
  password: process.env.DB_PASSWORD ?? defaults.password,
};

/** The DB_* variables that point the service at `server` (the suites' by default), its database aside. */
export const connectionEnv = (server = postgresServer): Record<string, string> => ({
  DB_HOSTNAME: server.host,
  DB_PORT: String(server.port),
  DB_USERNAME: server.user,
  DB_PASSWORD: server.password,
});

/** The database to connect to for CREATE and DROP DATABASE. */
export const adminDatabase = process.env.DB_NAME ?? defaults.name;

/** A knex pool of at most `max` connections to `database` on `server` (the suites' by default). */
export const knexTo = (database: string, max: number, server = postgresServer): Knex =>
  knex({ client: 'pg', connection: { ...server, database }, pool: { min: 0, max } });

/** The rows `sql` answers on `db`. */
export async function rowsOf<Row>(db: Knex, sql: string, bindings: Knex.RawBinding[] = []): Promise<Row[]> {
  return (await db.raw<{ rows: Row[] }>(sql, bindings)).rows;
}

/** `SELECT count(*) FROM <from>`'s answer; `from` may go on with a WHERE, its values in `bindings`. */
export async function countOf(db: Knex, from: string, bindings: Knex.RawBinding[] = []): Promise<number> {
  const [row] = await rowsOf<{ n: number }>(db, `SELECT count(*)::int AS n FROM ${from}`, bindings);
  const n = row?.n;
  if (n === undefined) throw new Error(`SELECT count(*) FROM ${from} answered no row`);
  return n;
}

/**
 * A new empty database on that server, named `<prefix>_<pid>_<counter>_<time>`, and how to drop it.
 * `ctype` creates it with that LC_CTYPE (and LC_COLLATE `C`) from template0, as a cluster
 * initialised with another locale would have it; else it takes template1's.
 */
let scratchCounter = 0;
export async function createScratchDatabase(
  prefix: string,
  options: { ctype?: string } = {},
): Promise<{ name: string; drop(): Promise<void> }> {
  scratchCounter += 1;
  const name = `${prefix}_${process.pid}_${scratchCounter}_${Date.now().toString(36)}`;
  const admin = knexTo(adminDatabase, 1);
  const { ctype } = options;
  // A utility statement takes no bound values: the locale is written in, so only a locale name passes.
  if (ctype !== undefined && !/^[\w.@-]+$/.test(ctype)) throw new Error(`not a locale name: ${ctype}`);
  await admin.raw(
    ctype === undefined
      ? `CREATE DATABASE "${name}"`
      : `CREATE DATABASE "${name}" TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE '${ctype}'`,
  );
  return {
    name,
    drop: async () => {
      // WITH (FORCE): a connection a case left open must not keep the database.
      await admin.raw(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await admin.destroy();
    },
  };
}

/** One query as the superuser on a server of 127.0.0.1 (a test's own), on a connection of its own. */
export async function queryServer<Row>(
  port: number,
  database: string,
  sql: string,
  values: unknown[] = [],
): Promise<Row[]> {
  const client = new Client({ host: '127.0.0.1', port, user: postgresServer.user, database });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query(sql, values)).rows as Row[];
  } finally {
    await client.end();
  }
}

const DEBIAN_ROOT = '/usr/lib/postgresql';

/** The folder of the server binaries: PG_BIN, or the newest /usr/lib/postgresql/<major>/bin with an initdb. */
function postgresBinDir(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const majors = existsSync(DEBIAN_ROOT)
    ? readdirSync(DEBIAN_ROOT)
        .filter((v) => existsSync(path.join(DEBIAN_ROOT, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  return path.join(DEBIAN_ROOT, majors[0] ?? '15', 'bin');
}

/** One server binary (initdb, pg_ctl, postgres, createdb, pg_isready). */
export const postgresBin = (tool: string): string => path.join(postgresBinDir(), tool);

/** The postgres account's uid and gid when this process is root (it must hand the work to it), else undefined. */
export function postgresAccount(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  // Throws when the machine has no postgres user.
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Gives a file or folder to the postgres account (when running as root). */
export function ownForPostgres(file: string): void {
  const account = postgresAccount();
  if (account) chownSync(file, account.uid, account.gid);
}

/** Runs a server binary to completion, as the postgres account when this process is root. */
export function runPostgresTool(tool: string, args: string[], options: ExecFileSyncOptions = {}): string {
  const command = postgresBin(tool);
  if (!existsSync(command))
    throw new Error(
      `${command} is missing: apt-get install postgresql (or set PG_BIN to the binaries' folder)`,
    );
  try {
    return execFileSync(command, args, {
      stdio: 'pipe',
      timeout: 60_000,
      ...postgresAccount(),
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      ...options,
    }).toString();
  } catch (error) {
    const stderr = (error as { stderr?: Buffer }).stderr?.toString() ?? '';
    throw new Error(`${tool} ${args.join(' ')} failed: ${stderr.trim()}`, { cause: error });
  }
}

/**
 * initdb into `data` (its parent must be the postgres account's): UTF-8, the superuser `user`;
 * `extra` says how clients authenticate and anything else the caller needs.
 */
export function initdb(data: string, user: string, extra: string[]): void {
  runPostgresTool('initdb', ['-D', data, '-U', user, '-E', 'UTF8', ...extra]);
}

/** Settings a server in `data` reads at its next start (postgresql.auto.conf: its later lines win). */
export function configureServer(data: string, settings: Record<string, string>): void {
  const lines = Object.entries(settings).map(
    ([name, value]) => `${name} = '${value.replaceAll("'", "''")}'\n`,
  );
  appendFileSync(path.join(data, 'postgresql.auto.conf'), lines.join(''));
}

/**
 * pg_ctl start of the server in `data` on 127.0.0.1:`port`, its socket in `socketDir`, with more
 * `-c` settings and environment; `wait` false returns at once (a recovery may take longer than pg_ctl waits).
 */
export function startServer(
  data: string,
  options: { port: number; socketDir: string; log: string; flags?: string[]; env?: Record<string, string> },
  wait = true,
): void {
  const { port, socketDir, log, flags = [], env } = options;
  const server = [`-p ${port}`, `-k ${socketDir}`, '-c listen_addresses=127.0.0.1', '-c fsync=off', ...flags];
  runPostgresTool('pg_ctl', ['-D', data, '-o', server.join(' '), '-l', log, wait ? '-w' : '-W', 'start'], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
  });
}

/** pg_ctl stop: `fast` terminates the sessions (maintenance), `immediate` is a node lost without warning. */
export function stopServer(data: string, mode: 'fast' | 'immediate'): void {
  runPostgresTool('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']);
}

export interface OwnPostgresOptions {
  /** More environment for the server and the commands it runs (archive_command, restore_command). */
  env?: Record<string, string>;
  /** The folder (default: a new one under the OS temp dir). */
  dir?: string;
  /** initdb's superuser (default: the suites' server's) and its other arguments (default: trust, no sync). */
  user?: string;
  initdb?: string[];
}

/**
 * A throw-away PostgreSQL cluster of the caller's own (initdb in a temporary folder, or a data
 * folder a restore filled; its own port, its socket inside that folder), so stopping it touches
 * nothing else.
 */
export class OwnPostgres {
  readonly dir: string;
  port = 0;

  constructor(private readonly options: OwnPostgresOptions = {}) {
    this.dir = options.dir ?? mkdtempSync(path.join(tmpdir(), 'sp-own-pg-'));
  }

  get data(): string {
    return path.join(this.dir, 'data');
  }

  /** The folder handed to the postgres account and a free port, before anything fills `data`. */
  async reserve(): Promise<void> {
    ownForPostgres(this.dir);
    this.port = await freePort();
  }

  async init(): Promise<void> {
    await this.reserve();
    const { user = postgresServer.user, initdb: extra = ['-A', 'trust', '--no-sync'] } = this.options;
    initdb(this.data, user, extra);
  }

  /** Settings the server reads at its next start (postgresql.auto.conf: its later lines win). */
  configure(settings: Record<string, string>): void {
    configureServer(this.data, settings);
  }

  /**
   * pg_ctl start, with more `-c` settings in `flags` (they win over the defaults); `wait` false
   * returns at once (a recovery may take longer than pg_ctl waits).
   */
  start(wait = true, flags: string[] = []): void {
    const { port, dir, options } = this;
    startServer(
      this.data,
      { port, socketDir: dir, log: path.join(dir, 'log'), flags, env: options.env },
      wait,
    );
  }

  /** pg_ctl reload: the server reads its configuration and certificate files again. */
  reload(): void {
    runPostgresTool('pg_ctl', ['-D', this.data, '-w', 'reload']);
  }

  /** Fast shutdown: sessions are terminated, as when a database server goes down for maintenance. */
  stop(): void {
    stopServer(this.data, 'fast');
  }

  /** The server lost without warning: SIGKILL to the postmaster's process group (pg_ctl starts it in a session of its own). */
  kill(): void {
    const pid = Number(readFileSync(path.join(this.data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    if (!Number.isInteger(pid) || pid <= 1) throw new Error(`no postmaster pid in ${this.data}`);
    process.kill(-pid, 'SIGKILL');
  }

  /** Whether the server's postmaster is running (pg_ctl status). */
  running(): boolean {
    try {
      runPostgresTool('pg_ctl', ['-D', this.data, 'status']);
      return true;
    } catch {
      return false;
    }
  }

  /** The server's log so far (why a start or a recovery failed). */
  log(): string {
    const file = path.join(this.dir, 'log');
    return existsSync(file) ? readFileSync(file, 'utf8') : '';
  }

  destroy(): void {
    try {
      stopServer(this.data, 'immediate');
    } catch {
      // already stopped
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
