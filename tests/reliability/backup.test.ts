import { listBackups, durationMs } from '../../tools/harness/barman';
import {
  apiFindings,
  BackupDrill,
  countMismatches,
  lossOf,
  presentWrites,
  query,
  serveRecovered,
  writeLoad,
} from '../../tools/harness/backup-drill';
import { report, sleep, startOn, stopAllServices } from './support';

/**
 * Shorter than prod's so the loss case sees several forced segment switches in seconds;
 * bench:backup runs the chart's value (tools/harness/barman.ts, chartArchiveTimeout).
 */
const ARCHIVE_TIMEOUT = '10s';
/** Beyond archive_timeout: shipping the closed segment (the tool starts, compresses, uploads). */
const ARCHIVE_MARGIN_S = 10;
/** A segment closed by hand is in the store within this (the tools start slowly on a busy host). */
const ARCHIVED_WITHIN_MS = 60_000;
/** Writes flow this long before the loss: longer than the bound, so a broken archive fails the case. */
const LOAD_BEFORE_LOSS_MS = 30_000;
const WORKERS = 4;
/** Each barman tool is a Python start (boto3) of 1 s on a quiet host and several on a busy one. */
const CASE_TIMEOUT_MS = 600_000;

const drill = new BackupDrill({
  archiveTimeout: ARCHIVE_TIMEOUT,
  destinationPath: 's3://backups/social-posts',
  serverName: 'social-posts',
  walCompression: 'gzip',
  dataCompression: 'gzip',
  jobs: 2,
  // A spread checkpoint would hold the backup's start for minutes (checkpoint_timeout).
  immediateCheckpoint: true,
  log: (line) => process.stdout.write(`[backup drill ${new Date().toISOString()}] ${line}\n`),
});
/** The service on the database `postgres` of the drill's server at `port`. */
const serveOn = (port: number) => startOn(port, 'postgres');
let primaryBase = '';

beforeAll(async () => {
  await drill.start();
  primaryBase = (await serveOn(drill.primary.port)).base;
});

afterAll(async () => {
  await stopAllServices();
  await drill.destroy();
});

test(
  'When every post is deleted by mistake under write load, then a new server recovered from the base backup and the archived WAL to just before the mistake has every write acknowledged before it and every deleted post, in SQL and through the API, and vote counts equal the votes rows',
  async () => {
    const load = await writeLoad(primaryBase, WORKERS, 'pitr');
    const { backup, before, deleted } = await (async () => {
      try {
        await sleep(1000);
        const taken = await drill.baseBackup();
        await sleep(1500);
        const mistake = await drill.mistake('postgres');
        await sleep(500);
        await drill.archiveNow(ARCHIVED_WITHIN_MS);
        return { backup: taken, ...mistake };
      } finally {
        await load.stop();
      }
    })();

    const recovered = await drill.recover(backup.backupId, before);
    const port = recovered.server.port;
    const { svc, readyMs } = await serveRecovered(serveOn, port);
    const ackedBefore = load.writes.filter((w) => w.ackAt < before.getTime());
    const present = await presentWrites(port, 'postgres', ackedBefore);
    const missing = ackedBefore.filter((w) => !present.has(w));
    // A post acknowledged after the moment may or may not have been there to be deleted.
    const ackedAfter = new Set(
      load.writes.flatMap((w) => (w.kind === 'post' && w.ackAt >= before.getTime() ? [w.id] : [])),
    );
    const deletedBefore = deleted.filter((id) => !ackedAfter.has(id));
    const back = await query<{ id: number }>(
      port,
      'postgres',
      'SELECT id FROM posts WHERE id = ANY($1::int[])',
      [deletedBefore],
    );
    const mismatches = await countMismatches(port, 'postgres');
    const api = await apiFindings(svc, port, 'postgres', ackedBefore, 200);
    const [left] = await query<{ n: number }>(
      drill.primary.port,
      'postgres',
      'SELECT count(*)::int AS n FROM posts',
    );
    report('point-in-time recovery', {
      backupMs: backup.ms,
      backupBytes: backup.bytes,
      acknowledged: load.writes.length,
      acknowledgedBefore: ackedBefore.length,
      deleted: deleted.length,
      missing: missing.length,
      deletedBack: `${String(back.length)}/${String(deletedBefore.length)}`,
      countMismatches: mismatches,
      apiChecked: api.checked,
      downloadMs: recovered.downloadMs,
      replayMs: recovered.replayMs,
      serviceReadyMs: readyMs,
    });

    expect(ackedBefore.filter((w) => w.kind === 'post').length).toBeGreaterThan(10);
    expect(ackedBefore.filter((w) => w.kind === 'vote').length).toBeGreaterThan(10);
    expect(deleted.length).toBeGreaterThan(10);
    // The primary still has the mistake: what came back came from the store.
    expect(left?.n).toBeLessThan(deleted.length);
    expect(missing).toEqual([]);
    expect(back.length).toBe(deletedBefore.length);
    expect(mismatches).toBe(0);
    expect(api.notShown).toEqual([]);
    expect(api.wrongCounts).toEqual([]);
    expect(svc.child.exitCode).toBeNull();
    await svc.stop('SIGTERM');
  },
  CASE_TIMEOUT_MS,
);

test(
  `When the primary is lost without warning under write load, then recovery to the end of the archived WAL loses no write acknowledged before the last archived commit, and at most archive_timeout (${ARCHIVE_TIMEOUT}) plus ${String(ARCHIVE_MARGIN_S)} s of writes`,
  async () => {
    const backupId =
      (await listBackups(drill.barman, drill.store.env)).at(-1)?.backup_id ??
      (await drill.baseBackup()).backupId;
    const load = await writeLoad(primaryBase, WORKERS, 'loss');
    try {
      await sleep(LOAD_BEFORE_LOSS_MS);
      drill.loseThePrimary();
      await sleep(1000);
    } finally {
      await load.stop();
    }

    const recovered = await drill.recover(backupId);
    const port = recovered.server.port;
    const { svc, readyMs } = await serveRecovered(serveOn, port);
    const present = await presentWrites(port, 'postgres', load.writes);
    const loss = lossOf(load.writes, present, recovered.lastReplayed);
    const api = await apiFindings(svc, port, 'postgres', [...present], 100);
    report('primary lost', {
      acknowledged: loss.acknowledged,
      lostWrites: loss.lost.length,
      rpoSeconds: loss.rpoSeconds,
      lostBeforeLastReplayed: loss.lostBeforeLastReplayed.length,
      downloadMs: recovered.downloadMs,
      replayMs: recovered.replayMs,
      serviceReadyMs: readyMs,
      failedDuringLoss: load.failed,
    });

    expect(loss.acknowledged).toBeGreaterThan(50);
    expect(present.size).toBeGreaterThan(0);
    expect(loss.lostBeforeLastReplayed).toEqual([]);
    expect(loss.rpoSeconds).toBeLessThanOrEqual(durationMs(ARCHIVE_TIMEOUT) / 1000 + ARCHIVE_MARGIN_S);
    expect(api.notShown).toEqual([]);
    expect(api.wrongCounts).toEqual([]);
    expect(await countMismatches(port, 'postgres')).toBe(0);
  },
  CASE_TIMEOUT_MS,
);
