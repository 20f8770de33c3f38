/**
 * A real PgBouncer of a test's own (reliability, bench): transaction pooling, the way
 * CloudNativePG's Pooler and most managed poolers run it, in front of any PostgreSQL, on a free
 * port, with its files in a temporary folder. `ignore_startup_parameters` is left at its default
 * on purpose: the service must need no pooler-side workaround. PgBouncer refuses to run as root,
 * so it runs as the postgres account when this process is root.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { pgbouncerBinary, pgbouncerVersion } from '../pgbouncer';
import { ownForPostgres, postgresAccount, postgresServer } from './postgres';
import { sleep } from './client';
import { freePort } from './service';

export interface PgBouncerOptions {
  /** 1.18: Debian 12's (no prepared-statement tracking); 1.24: 1.24.1 built from Debian 13's source. */
  version: '1.18' | '1.24';
  /** Where server connections go. */
  target: { host: string; port: number };
  /** Server connections per database and user: smaller than the service's pool, so they are shared. */
  poolSize: number;
  /** Set only when given (1.24 defaults to 200; 1.18 does not know the setting). */
  maxPreparedStatements?: number;
  /**
   * A configuration made elsewhere (k8s:local builds CloudNativePG's from a rendered Pooler):
   * settings written after, and so winning over, the ones above; users beside the admin
   * (name → password, as the auth_file holds them); lines of an auth_hba_file, which then decides
   * how each client authenticates.
   */
  overrides?: { settings?: Record<string, string>; users?: Record<string, string>; hba?: string[] };
}

export class OwnPgBouncer {
  /**
   * Its files (config, log, socket, binary), made by start(): a test file constructs its poolers
   * while jest collects the cases, and one whose cases are filtered out never starts nor stops.
   */
  dir = '';
  port = 0;
  /** "PgBouncer 1.24.1", read from the binary. */
  version = '';
  private child: ChildProcess | undefined;
  private target: { host: string; port: number };
  /** auth_type and auth_hba_file when the overrides bring hba rules. */
  private authSettings: Record<string, string> = {};

  constructor(private readonly options: PgBouncerOptions) {
    this.target = options.target;
  }

  /** The running PgBouncer's process id (its CPU time is read from /proc by the bench). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  private get ini(): string {
    return path.join(this.dir, 'pgbouncer.ini');
  }

  get log(): string {
    try {
      return readFileSync(path.join(this.dir, 'pgbouncer.log'), 'utf8');
    } catch {
      return '';
    }
  }

  private writeConfig(): void {
    const { poolSize, maxPreparedStatements } = this.options;
    const lines = [
      '[databases]',
      // Any database name: each test file works on a scratch database of its own.
      `* = host=${this.target.host} port=${String(this.target.port)}`,
      '',
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${String(this.port)}`,
      `unix_socket_dir = ${this.dir}`,
      `logfile = ${path.join(this.dir, 'pgbouncer.log')}`,
      'pool_mode = transaction',
      'auth_type = trust',
      // Listed even under trust: PgBouncer only lets in users it knows.
      `auth_file = ${path.join(this.dir, 'userlist.txt')}`,
      `admin_users = ${postgresServer.user}`,
      `default_pool_size = ${String(poolSize)}`,
      'min_pool_size = 0',
      'reserve_pool_size = 0',
      'max_client_conn = 1000',
      // Quick to find a server gone and to try its successor: a failover test waits on these.
      'server_connect_timeout = 2',
      'server_login_retry = 1',
      'query_wait_timeout = 30',
      ...(maxPreparedStatements === undefined
        ? []
        : [`max_prepared_statements = ${String(maxPreparedStatements)}`]),
      ...Object.entries({ ...this.authSettings, ...this.options.overrides?.settings }).map(
        ([key, value]) => `${key} = ${value}`,
      ),
      '',
    ];
    writeFileSync(this.ini, lines.join('\n'));
    ownForPostgres(this.ini);
  }

  /** The auth_file (and auth_hba_file) of the overrides; the admin user needs no password. */
  private writeAuthFiles(): void {
    const users = { [postgresServer.user]: '', ...this.options.overrides?.users };
    const quote = (text: string) => `"${text.replaceAll('"', '""')}"`;
    const userlist = Object.entries(users).map(([name, password]) => `${quote(name)} ${quote(password)}`);
    this.own('userlist.txt', `${userlist.join('\n')}\n`);
    const hba = this.options.overrides?.hba;
    if (hba) {
      // The admin console stays reachable without a password, before the given rules.
      this.own(
        'pg_hba.conf',
        [`host pgbouncer ${postgresServer.user} 127.0.0.1/32 trust`, ...hba, ''].join('\n'),
      );
      this.authSettings = { auth_type: 'hba', auth_hba_file: path.join(this.dir, 'pg_hba.conf') };
    }
  }

  private own(file: string, text: string): void {
    writeFileSync(path.join(this.dir, file), text, { mode: 0o600 });
    ownForPostgres(path.join(this.dir, file));
  }

  async start(): Promise<void> {
    this.dir = mkdtempSync(path.join(tmpdir(), 'sp-pgbouncer-'));
    ownForPostgres(this.dir);
    this.port = await freePort();
    // A copy in the folder: the build cache under root's home is not the postgres account's to read.
    const binary = path.join(this.dir, 'pgbouncer');
    copyFileSync(pgbouncerBinary(this.options.version), binary);
    ownForPostgres(binary);
    this.version = pgbouncerVersion(binary);
    if (!this.version.startsWith(`PgBouncer ${this.options.version}.`))
      throw new Error(`asked for PgBouncer ${this.options.version}, the binary is ${this.version}`);
    this.writeAuthFiles();
    this.writeConfig();
    const child = spawn(binary, [this.ini], { stdio: ['ignore', 'ignore', 'pipe'], ...postgresAccount() });
    this.child = child;
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        await this.admin('SHOW VERSION');
        return;
      } catch (error) {
        if (child.exitCode !== null || Date.now() > deadline) {
          child.kill('SIGKILL');
          throw new Error(`PgBouncer did not start: ${stderr}${this.log}`, { cause: error });
        }
        await sleep(100);
      }
    }
  }

  /** Runs a command on the admin console (database `pgbouncer`); its rows. */
  async admin(command: string): Promise<Record<string, unknown>[]> {
    const client = new Client({
      host: '127.0.0.1',
      port: this.port,
      user: postgresServer.user,
      database: 'pgbouncer',
      connectionTimeoutMillis: 2000,
    });
    client.on('error', () => undefined);
    await client.connect();
    try {
      // The admin console speaks the simple protocol only.
      const result = await client.query({ text: command, queryMode: 'simple' } as { text: string });
      return result.rows as Record<string, unknown>[];
    } finally {
      await client.end();
    }
  }

  /**
   * Points the pooler at another server, as an operator (or CloudNativePG's Pooler following the
   * -rw service) does after a failover: new server connections go there after RELOAD. Server
   * connections to the old address are not reused, the same on 1.18 and 1.24 (seen in their logs):
   * idle ones are closed within a second ("database configuration changed"), one in a client's
   * transaction stays on the old server until that transaction ends, then closes ("close_needed").
   */
  async retarget(target: { host: string; port: number }): Promise<void> {
    this.target = target;
    this.writeConfig();
    await this.admin('RELOAD');
  }

  /**
   * Replaces every server connection while the address stays the same (a Service or DNS name
   * that now leads to another server, which RELOAD does not see): idle ones close at once, busy
   * ones when released; no client is dropped. RECONNECT exists on 1.18 and 1.24 alike; KILL
   * would also drop the clients, PAUSE would wait for every transaction to end.
   */
  async reconnect(): Promise<void> {
    await this.admin('RECONNECT');
  }

  async destroy(): Promise<void> {
    const child = this.child;
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGINT');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    }
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}
