/**
 * A PostgreSQL instance of the runner's own: initdb into a temporary folder as the postgres user,
 * its own port on 127.0.0.1 and its socket in that folder, so stopping it touches nothing else.
 * It stands in for the chart's in-chart PostgreSQL (same database, user and password).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  initdb,
  ownForPostgres,
  postgresAccount,
  postgresBin,
  runPostgresTool,
} from '../../tools/harness/postgres';
import { startLogged, stop, type Managed } from '../../tools/harness/processes';
import { waitFor } from './wait';

export interface PostgresOptions {
  dir: string;
  port: number;
  database: string;
  user: string;
  password: string;
}

/** The runner runs as root (run.ts checks), so the server runs as the postgres account. */
function account(): { uid: number; gid: number } {
  const found = postgresAccount();
  if (!found) throw new Error('the PostgreSQL of k8s:local is started as root, to run as postgres');
  return found;
}

export class Postgres {
  private server: Managed | undefined;
  private readonly account = account();
  private readonly data: string;
  private readonly log: string;

  constructor(private readonly options: PostgresOptions) {
    this.data = join(options.dir, 'data');
    this.log = join(options.dir, 'postgres.log');
  }

  /** initdb (scram passwords over TCP, like the postgres image) and the application database. */
  async init(): Promise<void> {
    const { dir, user, password } = this.options;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    ownForPostgres(dir);
    const passwordFile = join(dir, 'password');
    writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
    ownForPostgres(passwordFile);
    initdb(this.data, user, [
      `--pwfile=${passwordFile}`,
      '--auth-local=trust',
      '--auth-host=scram-sha-256',
      '--locale=C',
    ]);
    await this.start();
    // The postgres image creates POSTGRES_DB on first start; so does the runner.
    runPostgresTool('createdb', [
      '-h',
      dir,
      '-p',
      String(this.options.port),
      '-U',
      user,
      this.options.database,
    ]);
  }

  async start(): Promise<void> {
    if (this.server && !this.server.hasExited()) return;
    const { dir, port, user } = this.options;
    this.server = startLogged(
      'postgres',
      postgresBin('postgres'),
      ['-D', this.data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1'],
      this.log,
      { uid: this.account.uid, gid: this.account.gid, env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } },
    );
    const server = this.server;
    await waitFor('PostgreSQL to accept connections', 60_000, () => {
      if (server.hasExited()) throw new Error(`postgres exited; see ${this.log}`);
      try {
        execFileSync(postgresBin('pg_isready'), [
          '-q',
          '-h',
          dir,
          '-p',
          String(port),
          '-U',
          user,
          '-d',
          'postgres',
        ]);
        return Promise.resolve(true);
      } catch {
        return Promise.resolve(false);
      }
    });
  }

  /** Fast shutdown (SIGINT to the postmaster): sessions are cut, as when the pod goes away. */
  async stop(): Promise<void> {
    if (!this.server) return;
    await stop(this.server, 'SIGINT', 30_000);
    this.server = undefined;
  }
}
