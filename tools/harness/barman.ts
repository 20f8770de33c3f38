/**
 * Debian 12's barman-cli-cloud (3.4.0) run the way the Barman Cloud plugin's sidecar runs it:
 * the same tools with the same arguments, built from an ObjectStore's settings. The argument order
 * follows cloudnative-pg/plugin-barman-cloud v0.14.0 (commit 1e13020fe5f09fd8fc29ea03828f7b61375b3721,
 * internal/cnpgi/restore/restore.go) and the barman-cloud library it pins (cloudnative-pg/barman-cloud
 * commit 950b0f57e122e9bbfef059193801a34664cfd3ad: pkg/archiver/command.go, pkg/backup/backup.go,
 * pkg/command/commandbuilder.go, pkg/walarchive/cmd.go, pkg/restorer/restorer.go).
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import type { ObjectStore } from './object-store';
import { pollUntil } from './poll';
import {
  ownForPostgres,
  postgresAccount,
  postgresBin,
  postgresServer,
  queryServer,
  type OwnPostgres,
} from './postgres';
import { ROOT } from './service';

/** The compressions barman-cloud 3.4 knows, each passed as `--<name>` (plugin: `fmt.Sprintf("--%v", compression)`). */
export const COMPRESSIONS = ['gzip', 'bzip2', 'snappy'] as const;
export type Compression = (typeof COMPRESSIONS)[number];

/** What an ObjectStore's `spec.configuration` says, for an S3-compatible store with static keys. */
export interface BarmanSettings {
  /** `destinationPath`: s3://bucket/folder */
  destinationPath: string;
  /** `endpointURL` */
  endpointUrl: string;
  /** `serverName`: the folder under destinationPath (the Cluster's name by default). */
  serverName: string;
  /** `wal.compression` */
  walCompression?: Compression;
  /** `data.compression` */
  dataCompression?: Compression;
  /** `data.jobs` */
  jobs?: number;
  /** `data.immediateCheckpoint` */
  immediateCheckpoint?: boolean;
}

/** s3://bucket/folder → bucket and folder */
export function splitDestination(destinationPath: string): { bucket: string; folder: string } {
  const match = /^s3:\/\/([^/]+)\/?(.*)$/.exec(destinationPath);
  if (!match?.[1])
    throw new Error(`destinationPath must be s3://<bucket>[/<folder>], not ${destinationPath}`);
  return { bucket: match[1], folder: (match[2] ?? '').replace(/\/+$/, '') };
}

/** Bytes in `store` of a serverName's base backups or WAL under the settings' destinationPath. */
export function storedBytes(store: ObjectStore, s: BarmanSettings, what: 'base' | 'wals'): number {
  return store.bytes(path.posix.join(splitDestination(s.destinationPath).folder, s.serverName, what));
}

/** With `credentials.aws` (the only provider the drill's store speaks), every command gets `--cloud-provider aws-s3`. */
const CLOUD = ['--cloud-provider', 'aws-s3'];

/** How every tool but barman-cloud-restore ends: the store's endpoint, provider, destinationPath and serverName. */
const storeArgs = (s: BarmanSettings): string[] => [
  '--endpoint-url',
  s.endpointUrl,
  ...CLOUD,
  s.destinationPath,
  s.serverName,
];

/** barman-cloud-wal-archive's options before the WAL path (BarmanCloudWalArchiveOptions). */
function walArchiveArgs(s: BarmanSettings): string[] {
  return [...(s.walCompression ? [`--${s.walCompression}`] : []), ...storeArgs(s)];
}

/** barman-cloud-backup's arguments (GetBarmanCloudBackupOptions); the plugin names backups `backup-<time>`. */
function backupArgs(s: BarmanSettings, backupName: string): string[] {
  return [
    ...['--user', 'postgres', '--name', backupName],
    ...(s.dataCompression ? [`--${s.dataCompression}`] : []),
    ...(s.immediateCheckpoint ? ['--immediate-checkpoint'] : []),
    ...(s.jobs === undefined ? [] : ['--jobs', String(s.jobs)]),
    ...storeArgs(s),
  ];
}

/** barman-cloud-restore's arguments (restoreDataDir): the backup's id and the new data folder. */
function restoreArgs(s: BarmanSettings, backupId: string, dataDir: string): string[] {
  return [...CLOUD, '--endpoint-url', s.endpointUrl, s.destinationPath, s.serverName, backupId, dataDir];
}

/** barman-cloud-backup-list's arguments, as JSON. */
const backupListArgs = (s: BarmanSettings): string[] => ['--format', 'json', ...storeArgs(s)];

/** One word for a shell (archive_command and restore_command are run by /bin/sh). */
const shellWord = (word: string): string => `'${word.replaceAll("'", `'\\''`)}'`;

/** The settings of a primary that archives every WAL segment into the store. */
export function archivingSettings(s: BarmanSettings, archiveTimeout: string): Record<string, string> {
  return {
    wal_level: 'replica',
    archive_mode: 'on',
    archive_timeout: archiveTimeout,
    archive_command: ['barman-cloud-wal-archive', ...walArchiveArgs(s)].map(shellWord).join(' ') + ' %p',
  };
}

/** A moment as a timestamptz literal recovery_target_time reads ("YYYY-MM-DD hh:mm:ss.mmm+00"). */
const postgresTime = (moment: Date): string => moment.toISOString().replace('T', ' ').replace('Z', '+00');

/** The settings of a server recovering from the store: to `targetTime`, or to the end of the archive. */
function recoverySettings(s: BarmanSettings, targetTime?: Date): Record<string, string> {
  return {
    // barman-cloud-wal-restore's options before the WAL name and destination (CloudWalRestoreOptions).
    restore_command: ['barman-cloud-wal-restore', ...storeArgs(s)].map(shellWord).join(' ') + ' %f %p',
    // It writes to a destination of its own (another serverName), or, as here, to none.
    archive_mode: 'off',
    ...(targetTime
      ? { recovery_target_time: postgresTime(targetTime), recovery_target_action: 'promote' }
      : {}),
  };
}

/**
 * Runs a command as the postgres account (a barman tool, psql) without blocking this process, with
 * only PATH and `env` in its environment: the store's credentials go nowhere else.
 */
function runAsPostgres(command: string, args: string[], env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
        ...postgresAccount(),
        maxBuffer: 64 * 1024 * 1024,
      },
      (error, stdout, stderr) => {
        if (error)
          reject(new Error(`${command} ${args.join(' ')} failed: ${stderr.trim() || error.message}`));
        else resolve(stdout);
      },
    );
  });
}

export interface BackupInfo {
  backup_id: string;
  backup_name?: string;
  begin_wal: string;
  end_wal: string;
  end_time: string;
  status: string;
}

/** The backups in the store, oldest first (barman-cloud-backup-list). */
export async function listBackups(s: BarmanSettings, env: Record<string, string>): Promise<BackupInfo[]> {
  const out = await runAsPostgres('barman-cloud-backup-list', backupListArgs(s), env);
  return (JSON.parse(out) as { backups_list: BackupInfo[] }).backups_list;
}

/** PostgreSQL's duration syntax for a setting in seconds ("60s", "5min", "1h", "500ms", "30"), in ms. */
export function durationMs(value: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h|d)?\s*$/.exec(value);
  if (!match) throw new Error(`not a PostgreSQL duration: "${value}" (e.g. 60s, 5min)`);
  const unit = { ms: 1, s: 1000, min: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] ?? 's'] ?? 1000;
  return Number(match[1]) * unit;
}

/** CloudNativePG's archive_timeout where a Cluster sets none (5 minutes: cloudnative-pg v1.15.1's release notes). */
export const CNPG_DEFAULT_ARCHIVE_TIMEOUT = '5min';
/** The drill's stand-in when the chart sets no archive_timeout: a minute, as prod's values set it. */
const FALLBACK_ARCHIVE_TIMEOUT = '60s';

/** prod's archive_timeout: cnpg.cluster.parameters.archive_timeout of chart/values-prod.yaml, or the fallback. */
export function chartArchiveTimeout(): { value: string; from: string } {
  const values = parse(readFileSync(path.join(ROOT, 'chart', 'values-prod.yaml'), 'utf8')) as {
    cnpg?: { cluster?: { parameters?: Record<string, unknown> } };
  };
  const set = values.cnpg?.cluster?.parameters?.archive_timeout;
  if (typeof set === 'string' && set !== '') return { value: set, from: 'chart/values-prod.yaml' };
  return {
    value: FALLBACK_ARCHIVE_TIMEOUT,
    from: `the drill's stand-in: chart/values-prod.yaml sets none, so CloudNativePG's ${CNPG_DEFAULT_ARCHIVE_TIMEOUT} runs there`,
  };
}

/** Where a barman tool reaches the instance it backs up: libpq's PGHOST (a socket folder) and PGPORT. */
export interface Instance {
  host: string;
  port: number;
}

/**
 * A base backup of `instance` with barman-cloud-backup, named `backup-<time>` as the plugin names
 * them; resolves once barman-cloud-backup-list shows it DONE.
 */
export async function takeBaseBackup(
  s: BarmanSettings,
  env: Record<string, string>,
  instance: Instance,
): Promise<{ backup: BackupInfo; ms: number }> {
  const name = `backup-${new Date().toISOString().replace(/[-:.]/g, '')}`;
  const started = Date.now();
  await runAsPostgres('barman-cloud-backup', backupArgs(s, name), {
    ...env,
    PGHOST: instance.host,
    PGPORT: String(instance.port),
  });
  const ms = Date.now() - started;
  const backup = (await listBackups(s, env)).find((b) => b.backup_name === name);
  if (!backup) throw new Error(`barman-cloud-backup-list does not list ${name}`);
  if (backup.status !== 'DONE') throw new Error(`backup ${name} is ${backup.status}`);
  return { backup, ms };
}

export interface RecoveryRun {
  /** barman-cloud-restore's wall time: the base backup downloaded and unpacked. */
  downloadMs: number;
  /** From the server's start to the end of recovery (promoted, writes accepted): the WAL replay. */
  replayMs: number;
  /** The commit time of the last transaction replayed. */
  lastReplayed: Date | null;
}

export interface RecoveryOptions {
  /** Where the backup and the WAL are read from. */
  source: BarmanSettings;
  backupId: string;
  /** The store's credentials, for the tools and the server's restore_command. */
  env: Record<string, string>;
  /** Recover to this moment (then promote); undefined: to the end of the archived WAL. */
  target?: Date;
  /** The recovered server archives its own WAL here (a serverName of its own), else nowhere. */
  archiveTo?: { settings: BarmanSettings; archiveTimeout: string };
  withinMs?: number;
}

/**
 * Fills `server`'s (reserved, empty) data folder from a base backup and starts it recovering from
 * the archived WAL; resolves once it is promoted. The server must run with `options.env`.
 */
export async function recoverServer(server: OwnPostgres, options: RecoveryOptions): Promise<RecoveryRun> {
  const { source, backupId, env, target, archiveTo, withinMs = 3_600_000 } = options;
  const downloadStarted = Date.now();
  await runAsPostgres('barman-cloud-restore', restoreArgs(source, backupId, server.data), env);
  const downloadMs = Date.now() - downloadStarted;
  server.configure({
    ...recoverySettings(source, target),
    ...(archiveTo ? archivingSettings(archiveTo.settings, archiveTo.archiveTimeout) : {}),
  });
  const signal = path.join(server.data, 'recovery.signal');
  writeFileSync(signal, '');
  ownForPostgres(signal);
  const replayStarted = Date.now();
  server.start(false);
  const done = await pollUntil(
    async () => {
      const state = await queryServer<{ recovering: boolean; last: Date | null }>(
        server.port,
        'postgres',
        'SELECT pg_is_in_recovery() AS recovering, pg_last_xact_replay_timestamp() AS last',
      ).then(
        (rows) => rows[0],
        () => undefined,
      );
      // pg_ctl -W returns before the postmaster writes its pid file: a few seconds' grace.
      if (!state && Date.now() - replayStarted > 5000 && !server.running())
        throw new Error(`the recovering server stopped:\n${server.log()}`);
      return state;
    },
    (state) => state?.recovering === false,
    { withinMs, everyMs: 200 },
  );
  if (!done.held)
    throw new Error(`the recovered server was not promoted within ${String(withinMs)} ms:\n${server.log()}`);
  return { downloadMs, replayMs: Date.now() - replayStarted, lastReplayed: done.value?.last ?? null };
}

/** Closes the server's current WAL segment and waits until its archiver has shipped it; the segment's name. */
export async function archiveNow(port: number, withinMs = 60_000): Promise<string> {
  const [row] = await queryServer<{ wal: string }>(
    port,
    'postgres',
    'SELECT pg_walfile_name(pg_switch_wal()) AS wal',
  );
  const wal = row?.wal ?? '';
  const polled = await pollUntil(
    () =>
      queryServer<{ last: string | null; failed: string }>(
        port,
        'postgres',
        'SELECT last_archived_wal AS last, failed_count::text AS failed FROM pg_stat_archiver',
      ).then((rows) => rows[0]),
    (archiver) => (archiver?.last ?? '') >= wal,
    { withinMs, everyMs: 100 },
  );
  if (!polled.held)
    throw new Error(`${wal} was not archived within ${String(withinMs)} ms: ${JSON.stringify(polled.value)}`);
  return wal;
}

/**
 * An operator's mistake as psql runs it on the instance: every row of `table` deleted. Resolves
 * with the moment just before it and the ids it deleted.
 */
export async function massDelete(
  instance: Instance,
  database: string,
  table: 'posts',
): Promise<{ before: Date; deleted: number[] }> {
  const before = new Date();
  const out = await runAsPostgres(
    postgresBin('psql'),
    [
      '-h',
      instance.host,
      '-p',
      String(instance.port),
      '-U',
      postgresServer.user,
      '-d',
      database,
      '-Atq',
      '-c',
      `DELETE FROM ${table} RETURNING id`,
    ],
    {},
  );
  return { before, deleted: out.split('\n').filter(Boolean).map(Number) };
}
