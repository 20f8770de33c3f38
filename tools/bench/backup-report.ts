/** The figures of `npm run bench:backup` (tools/bench/backup.ts) and the Markdown table it prints of them. */

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

/** The run's row under the header of the table in docs/backups.md. */
export function backupTable(r: BackupResult): string[] {
  return [
    '| Posts | archive_timeout | Writes lost | RPO (s) | Lost before last replayed | Download (s) | WAL replay (s) | Service ready (s) | RTO (s) | Database → backup (MB) | Backup (s) | WAL archived (MB) | Measured |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    `| ${r.posts.toLocaleString('en')} | ${r.archiveTimeout} | ${String(r.rpo.lostWrites)} of ${String(r.rpo.acknowledged)} | ${String(r.rpo.seconds)} | ${String(r.rpo.lostBeforeLastReplayed)} | ${String(r.rto.downloadSeconds)} | ${String(r.rto.replaySeconds)} | ${String(r.rto.serviceReadySeconds)} | ${String(r.rto.totalSeconds)} | ${mb(r.backup.dataBytes)} → ${mb(r.backup.bytes)} | ${String(r.backup.seconds)} | ${mb(r.walBytes)} | ${r.date}, ${r.machine} |`,
  ];
}
