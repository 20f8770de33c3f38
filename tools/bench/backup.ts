/**
 * `npm run bench:backup -- [--posts 1000000] [--archive-timeout 60s] [--load SECONDS] [--workers 4] [--compression gzip|bzip2|snappy|none] [--jobs 2]`
 *
 * The drill of tests/reliability/backup.test.ts at production size, with prod's archive_timeout (the
 * chart's, unless given): a primary of its own seeded with `--posts` posts (tools/harness/seed.ts) archives
 * its WAL into s3rver with barman-cloud-wal-archive, a base backup is taken with barman-cloud-backup
 * under write load through the service, writes flow `--load` seconds more, then the primary is
 * lost without warning and a new server is recovered from the store to the end of the archive.
 * Prints the RPO (acknowledged writes lost, and their span in seconds), the RTO (base backup
 * download, WAL replay, the service's start to ready) and the backup's size and time, then the
 * run's row of the table in docs/backups.md.
 */
import { spawnSync } from 'node:child_process';
import {
  BackupDrill,
  countMismatches,
  lossOf,
  presentWrites,
  query,
  serveRecovered,
  writeLoad,
} from '../harness/backup-drill';
import { chartArchiveTimeout, COMPRESSIONS, durationMs, type Compression } from '../harness/barman';
import { postgresServer } from '../harness/postgres';
import { startService, stopAll } from '../harness/service';
import { benchServiceEnv, seed } from '../harness/seed';
import { backupTable, type BackupResult } from './backup-report';
import { cpusText, fmt, loadAverageText, mark, option, runMain, table, usage } from './common';

const USAGE =
  'usage: npm run bench:backup -- [--posts N ≥ 1000] [--archive-timeout 60s|5min|…] [--load SECONDS] [--workers N] [--compression gzip|bzip2|snappy|none] [--jobs N]';
const fail = (reason: string) => {
  usage(false, `${reason}\n${USAGE}`);
};
const wholeNumber = (name: string, fallback: number, least: number): number => {
  const value = Number(option(name, String(fallback)));
  if (!Number.isInteger(value) || value < least) fail(`--${name} takes a whole number ≥ ${String(least)}`);
  return value;
};
const posts = wholeNumber('posts', 1_000_000, 1000);
const chart = chartArchiveTimeout();
const archiveTimeoutGiven = process.argv.includes('--archive-timeout');
const archiveTimeout = option('archive-timeout', chart.value);
let archiveTimeoutMs = 0;
try {
  archiveTimeoutMs = durationMs(archiveTimeout);
} catch (error) {
  fail(`--archive-timeout: ${(error as Error).message}`);
}
if (archiveTimeoutMs < 1000) fail('--archive-timeout must be at least 1s');
/** Long enough for several forced switches before the loss, so the loss lands anywhere in a segment's span. */
const loadSeconds = wholeNumber('load', Math.ceil((2.5 * archiveTimeoutMs) / 1000), 1);
const workers = wholeNumber('workers', 4, 1);
const compressionName = option('compression', 'gzip');
if (compressionName !== 'none' && !(COMPRESSIONS as readonly string[]).includes(compressionName))
  fail(`--compression takes ${COMPRESSIONS.join(', ')} or none`);
// Debian's barman-cli-cloud leaves python3-snappy optional; without it every archive would fail.
if (compressionName === 'snappy' && spawnSync('python3', ['-c', 'import snappy']).status !== 0)
  fail('--compression snappy needs python3-snappy installed (apt-get install python3-snappy)');
const compression = compressionName === 'none' ? undefined : (compressionName as Compression);
const jobs = wholeNumber('jobs', 2, 1);

const log = (line: string) => {
  process.stdout.write(`[bench:backup ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
};

const s = (ms: number) => Math.round(ms / 100) / 10;

/**
 * Under the write load: a base backup, the load kept on for `loadSeconds`, then the primary lost.
 * Returns the backup and every write the service acknowledged.
 */
async function backupAndLoseThePrimary(drill: BackupDrill, base: string) {
  const load = await writeLoad(base, workers, 'bench');
  try {
    const backup = await drill.baseBackup();
    log(`writes flow ${String(loadSeconds)} s, then the primary is lost`);
    await new Promise((resolve) => setTimeout(resolve, loadSeconds * 1000));
    drill.loseThePrimary();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    return { backup, writes: load.writes };
  } finally {
    await load.stop();
  }
}

async function run(): Promise<BackupResult> {
  const drill = new BackupDrill({
    archiveTimeout,
    destinationPath: 's3://backups/social-posts',
    serverName: 'social-posts',
    ...(compression ? { walCompression: compression, dataCompression: compression } : {}),
    jobs,
    immediateCheckpoint: true,
    log,
  });
  try {
    // Seeded before archiving starts: recovery replays only what follows the base backup.
    await drill.start(false);
    const server = { ...postgresServer, host: '127.0.0.1', port: drill.primary.port, password: '' };
    const seeded = await seed(posts, false, log, server);
    log(
      `seeded ${seeded.database}: ${String(seeded.posts)} posts, ${String(seeded.votes)} votes in ${seeded.seedSeconds.toFixed(0)} s`,
    );
    drill.startArchiving();
    const [size] = await query<{ bytes: string }>(
      drill.primary.port,
      seeded.database,
      'SELECT pg_database_size(current_database())::text AS bytes',
    );
    const start = (port: number) =>
      startService(
        {
          ...process.env,
          ...benchServiceEnv(seeded.database, { ...server, port }),
          PORT: '0',
          LOG_LEVEL: 'info',
        },
        { keep: (line) => /^listening on/.test(line.msg ?? '') },
      );
    const primarySvc = await start(drill.primary.port);
    const { backup, writes } = await backupAndLoseThePrimary(drill, primarySvc.base);
    await primarySvc.stop();
    const walBytes = drill.stored('wals');
    const recovered = await drill.recover(backup.backupId);
    const { svc, readyMs } = await serveRecovered(start, recovered.server.port);
    const present = await presentWrites(recovered.server.port, seeded.database, writes);
    const loss = lossOf(writes, present, recovered.lastReplayed);
    const mismatches = await countMismatches(recovered.server.port, seeded.database);
    await svc.stop('SIGTERM');
    return {
      posts,
      archiveTimeout,
      backup: { seconds: s(backup.ms), bytes: backup.bytes, dataBytes: Number(size?.bytes ?? 0) },
      walBytes,
      rpo: {
        acknowledged: loss.acknowledged,
        lostWrites: loss.lost.length,
        seconds: Math.round(loss.rpoSeconds * 10) / 10,
        lostBeforeLastReplayed: loss.lostBeforeLastReplayed.length,
      },
      rto: {
        downloadSeconds: s(recovered.downloadMs),
        replaySeconds: s(recovered.replayMs),
        serviceReadySeconds: s(readyMs),
        totalSeconds: s(recovered.downloadMs + recovered.replayMs + readyMs),
      },
      countMismatches: mismatches,
      machine: `${cpusText()}, load average ${loadAverageText()} at the end`,
      date: new Date().toISOString().slice(0, 10),
    };
  } finally {
    await drill.destroy();
  }
}

async function main(): Promise<void> {
  log(
    `${String(posts)} posts, archive_timeout ${archiveTimeout} (${archiveTimeoutGiven ? 'given' : chart.from})`,
  );
  const result = await run();
  const checks = [
    [
      'writes lost before the last replayed commit',
      result.rpo.lostBeforeLastReplayed,
      '0',
      result.rpo.lostBeforeLastReplayed === 0,
    ],
    ['vote counts off', result.countMismatches, '0', result.countMismatches === 0],
    [
      'RPO (s)',
      fmt(result.rpo.seconds, 1),
      `≤ ${String(archiveTimeoutMs / 1000 + 30)} (archive_timeout + 30)`,
      result.rpo.seconds <= archiveTimeoutMs / 1000 + 30,
    ],
  ] as const;
  const rows = checks.map(([Check, Measured, Target, held]) => ({
    Check,
    Measured,
    Target,
    Verdict: mark(held),
  }));
  process.stdout.write(['', ...backupTable(result), '', ...table(rows), ''].join('\n'));
  process.exitCode = checks.every(([, , , held]) => held) ? 0 : 1;
}

runMain(main, { after: stopAll });
