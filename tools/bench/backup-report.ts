/** The figures of `npm run bench:backup` (tools/bench/backup.ts) and their table in docs/backups.md. */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as prettier from 'prettier';
import { ROOT } from '../harness/service';

export interface BackupResult {
  posts: number;
  archiveTimeout: string;
  archiveTimeoutFrom: string;
  compression: string;
  jobs: number;
  workers: number;
  loadSeconds: number;
  backup: { seconds: number; bytes: number; dataBytes: number };
  walBytes: number;
  rpo: { acknowledged: number; lostWrites: number; seconds: number; lostBeforeLastReplayed: number };
  rto: { downloadSeconds: number; replaySeconds: number; serviceReadySeconds: number; totalSeconds: number };
  countMismatches: number;
  machine: string;
  date: string;
}

export const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/** The table's markers in docs/backups.md: the text outside them is written by hand. */
export const BACKUP_TABLE_START =
  '<!-- bench:backup:start (written by `npm run bench:backup`; edits inside are overwritten) -->';
export const BACKUP_TABLE_END = '<!-- bench:backup:end -->';

/** The table of docs/backups.md from every results/backup-<posts>.json there is. */
export async function renderBackupDocs(resultsDir: string, docsDir: string): Promise<void> {
  const results = readdirSync(resultsDir)
    .filter((f) => /^backup-\d+\.json$/.test(f))
    .map((f) => JSON.parse(readFileSync(path.join(resultsDir, f), 'utf8')) as BackupResult)
    .sort((a, b) => a.posts - b.posts);
  const rows = results.map(
    (r) =>
      `| ${r.posts.toLocaleString('en')} | ${r.archiveTimeout} | ${String(r.rpo.lostWrites)} of ${String(r.rpo.acknowledged)} | ${String(r.rpo.seconds)} | ${String(r.rpo.lostBeforeLastReplayed)} | ${String(r.rto.downloadSeconds)} | ${String(r.rto.replaySeconds)} | ${String(r.rto.serviceReadySeconds)} | ${String(r.rto.totalSeconds)} | ${mb(r.backup.dataBytes)} → ${mb(r.backup.bytes)} | ${String(r.backup.seconds)} | ${mb(r.walBytes)} | ${r.date}, ${r.machine} |`,
  );
  const table = [
    '| Posts | archive_timeout | Writes lost | RPO (s) | Lost before last replayed | Download (s) | WAL replay (s) | Service ready (s) | RTO (s) | Database → backup (MB) | Backup (s) | WAL archived (MB) | Measured |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
  ].join('\n');
  const file = path.join(docsDir, 'backups.md');
  // The written part stays; a file without the markers (a new one, or one under --out) gets the title alone.
  const old = existsSync(file) ? readFileSync(file, 'utf8') : '';
  const start = old.indexOf(BACKUP_TABLE_START);
  const end = old.indexOf(BACKUP_TABLE_END);
  const [before, after] =
    start >= 0 && end > start
      ? [old.slice(0, start), old.slice(end + BACKUP_TABLE_END.length)]
      : ['# Backups: what a lost primary costs, measured\n\n', '\n'];
  const text = `${before}${BACKUP_TABLE_START}\n\n${table}\n\n${BACKUP_TABLE_END}${after}`;
  mkdirSync(docsDir, { recursive: true });
  writeFileSync(
    file,
    await prettier.format(text, { ...(await prettier.resolveConfig(ROOT)), parser: 'markdown' }),
  );
}
