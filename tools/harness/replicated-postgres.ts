/**
 * A primary with a synchronous standby on this one machine, for failover tests: Debian's
 * PostgreSQL binaries as the postgres account (initdb, pg_basebackup -R, pg_ctl promote), each
 * server on a free port with its socket in a temporary folder. With `synchronous_commit = on` and
 * the standby named in `synchronous_standby_names`, a commit returns only once the standby has
 * the WAL: every acknowledged write survives the primary's loss.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  configureServer,
  initdb,
  ownForPostgres,
  postgresServer,
  queryServer,
  runPostgresTool,
  startServer,
  stopServer,
} from './postgres';
import { waitFor } from './poll';
import { freePort } from './service';

const STANDBY_NAME = 'standby1';

/** A server's folder: the primary, the synchronous standby, and `standby2`… for further ones. */
type Server = 'primary' | 'standby' | `standby${string}`;

export interface ReplicatedOptions {
  /** Settings of the primary before its first start (postgresql.auto.conf, which the standby's copy keeps). */
  settings?: Record<string, string>;
  /** More environment for both servers and the commands they run (archive_command). */
  env?: Record<string, string>;
  /**
   * Standbys (default 1). The first is synchronous; any further one streams asynchronously from
   * the primary, a hot standby that reads may go to, as CloudNativePG's other instances.
   */
  standbys?: number;
}

export class ReplicatedPostgres {
  readonly dir = mkdtempSync(path.join(tmpdir(), 'sp-replicated-pg-'));
  primaryPort = 0;
  standbyPort = 0;
  /** Every standby's port, the synchronous one first (its standbyPort). */
  standbyPorts: number[] = [];

  constructor(private readonly options: ReplicatedOptions = {}) {}

  private data(which: Server): string {
    return path.join(this.dir, which);
  }

  private start(which: Server, port: number, flags: string[]): void {
    const log = path.join(this.dir, `${which}.log`);
    startServer(this.data(which), { port, socketDir: this.dir, log, flags, env: this.options.env });
  }

  private primaryOptions(): string[] {
    return [
      '-c wal_level=replica',
      '-c max_wal_senders=4',
      `-c synchronous_standby_names=${STANDBY_NAME}`,
      '-c synchronous_commit=on',
    ];
  }

  /** Both servers running, the standby streaming synchronously. */
  async init(): Promise<void> {
    ownForPostgres(this.dir);
    this.primaryPort = await freePort();
    this.standbyPort = await freePort();
    // initdb's pg_hba.conf also lets `replication` connections in from 127.0.0.1 with -A trust.
    initdb(this.data('primary'), postgresServer.user, ['-A', 'trust', '--no-sync']);
    configureServer(this.data('primary'), this.options.settings ?? {});
    this.start('primary', this.primaryPort, this.primaryOptions());
    // The name the primary waits for.
    this.baseBackup('standby', STANDBY_NAME);
    // Promoted, it waits for no standby of its own: writes go on once it is the primary.
    this.start('standby', this.standbyPort, ['-c hot_standby=on']);
    this.standbyPorts = [this.standbyPort];
    for (let n = 2; n <= (this.options.standbys ?? 1); n++) {
      const port = await freePort();
      this.baseBackup(`standby${String(n)}`, `standby${String(n)}`);
      this.start(`standby${String(n)}`, port, ['-c hot_standby=on']);
      this.standbyPorts.push(port);
    }
    await this.synchronous();
  }

  /** A further standby's copy of the primary, streaming from it under `name`. */
  private baseBackup(which: Server, name: string): void {
    runPostgresTool('pg_basebackup', [
      '-D',
      this.data(which),
      '-R',
      '-h',
      '127.0.0.1',
      '-p',
      String(this.primaryPort),
      '-U',
      postgresServer.user,
      '-X',
      'stream',
    ]);
    this.follows(which, this.primaryPort, name);
  }

  /** The standby in `which` streams from the primary on `primaryPort` under `name` from its next start. */
  private follows(which: Server, primaryPort: number, name: string): void {
    const conninfo = `host=127.0.0.1 port=${String(primaryPort)} user=${postgresServer.user} application_name=${name}`;
    configureServer(this.data(which), { primary_conninfo: conninfo });
  }

  /** The folder of the standby on `port`. */
  private standbyAt(port: number): Server {
    const index = this.standbyPorts.indexOf(port);
    if (index < 0) throw new Error(`no standby on port ${String(port)}`);
    return index === 0 ? 'standby' : `standby${String(index + 1)}`;
  }

  /** Replay stops on the standby on `port` (it keeps receiving WAL): it falls behind the primary. */
  async pauseReplay(port: number): Promise<void> {
    await this.query(port, 'SELECT pg_wal_replay_pause()');
  }

  async resumeReplay(port: number): Promise<void> {
    await this.query(port, 'SELECT pg_wal_replay_resume()');
  }

  /** The standby on `port` lost: immediate stop. */
  killStandby(port: number): void {
    stopServer(this.data(this.standbyAt(port)), 'immediate');
  }

  /** The standby on `port` back after killStandby(). */
  startStandby(port: number): void {
    this.start(this.standbyAt(port), port, ['-c hot_standby=on']);
  }

  /**
   * The standby on `port` follows the primary on `primaryPort` (a promoted one), as CloudNativePG
   * points its other instances at a new primary: (re)started with the new primary_conninfo.
   */
  follow(port: number, primaryPort: number): void {
    const which = this.standbyAt(port);
    // A lost one (killStandby) comes back following the new primary.
    if (existsSync(path.join(this.data(which), 'postmaster.pid'))) stopServer(this.data(which), 'fast');
    this.follows(which, primaryPort, which);
    this.start(which, port, ['-c hot_standby=on']);
  }

  /** Resolves once the primary waits for the standby again (its commits are replicated). */
  private async synchronous(): Promise<void> {
    const sync = async () => (await this.syncState().catch(() => undefined)) === 'sync';
    await waitFor('the standby to be synchronous', 30_000, sync);
  }

  /** The standby's sync_state as the primary sees it ('sync' when commits wait for it). */
  async syncState(): Promise<string | undefined> {
    const rows = await this.query<{ sync_state: string }>(
      this.primaryPort,
      'SELECT sync_state FROM pg_stat_replication WHERE application_name = $1',
      [STANDBY_NAME],
    );
    return rows[0]?.sync_state;
  }

  /** One query on a server of the pair, on a connection of its own. */
  query<Row>(port: number, sql: string, values: unknown[] = []): Promise<Row[]> {
    return queryServer<Row>(port, 'postgres', sql, values);
  }

  /** The primary's node lost: immediate stop, no checkpoint, its sessions cut. */
  killPrimary(): void {
    stopServer(this.data('primary'), 'immediate');
  }

  /** The primary down for a while (fast shutdown: its sessions cut), the standby left waiting for it. */
  stopPrimary(): void {
    stopServer(this.data('primary'), 'fast');
  }

  /** The primary back after stopPrimary(); the standby reconnects and is synchronous again. */
  async startPrimary(): Promise<void> {
    this.start('primary', this.primaryPort, this.primaryOptions());
    await this.synchronous();
  }

  /** The standby becomes the primary (and takes writes) once this returns. */
  promoteStandby(): void {
    runPostgresTool('pg_ctl', ['-D', this.data('standby'), '-w', 'promote']);
  }

  destroy(): void {
    const further = this.standbyPorts.slice(1).map((port) => this.standbyAt(port));
    for (const which of ['primary', 'standby', ...further] as Server[]) {
      try {
        stopServer(this.data(which), 'immediate');
      } catch {
        // already stopped
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
