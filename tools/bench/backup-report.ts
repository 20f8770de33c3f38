/** The figures of `npm run bench:backup` (tools/bench/backup.ts) and the Markdown table it prints of them. */
import { fmt, table } from './common';

export interface BackupResult {
  posts: number;
  archiveTimeout: string;
  backup: { seconds: number; bytes: number; dataBytes: number };
  walBytes: number;
  rpo: { acknowledged: number; lostWrites: number; seconds: number; lostBeforeLastReplayed: number };
  rto: { downloadSeconds: number; replaySeconds: number; serviceReadySeconds: number; totalSeconds: number };
  countMismatches: number;
  machine: string;
  date: string;
}

const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/** The run's row under the header of the table in docs/backups.md. */
export function backupTable(r: BackupResult): string[] {
  return table([
    {
      Posts: r.posts,
      archive_timeout: r.archiveTimeout,
      'Writes lost': `${String(r.rpo.lostWrites)} of ${String(r.rpo.acknowledged)}`,
      'RPO (s)': fmt(r.rpo.seconds, 1),
      'Lost before last replayed': r.rpo.lostBeforeLastReplayed,
      'Download (s)': String(r.rto.downloadSeconds),
      'WAL replay (s)': String(r.rto.replaySeconds),
      'Service ready (s)': String(r.rto.serviceReadySeconds),
      'RTO (s)': String(r.rto.totalSeconds),
      'Database → backup (MB)': `${mb(r.backup.dataBytes)} → ${mb(r.backup.bytes)}`,
      'Backup (s)': String(r.backup.seconds),
      'WAL archived (MB)': mb(r.walBytes),
      Measured: `${r.date}, ${r.machine}`,
    },
  ]);
}
