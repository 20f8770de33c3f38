/**
 * The proof table: what the suite sent and observed, written by the suite (K8S_REPORT_FILE) and
 * printed by the runner. CLI: `tsx k8s-tests/report.ts <file>`.
 */
import { readFileSync } from 'node:fs';

export interface Report {
  target: string;
  requests: number;
  statuses: Record<string, number>;
  rateLimit?: {
    passed: number;
    limited: number;
    limitedByProxy: number;
    refillWaitMs: number;
    refillAnswer: number;
  };
  general?: { sent: number; limited: number };
  bypass?: { path: string; login: number; register: number }[];
  cors?: { allowed: string; foreign: string };
  database?: {
    readyDownMs: number;
    readyBackMs: number;
    /** Until ten API requests in a row answered 200. */
    servingBackMs: number;
    liveDuringOutage: number[];
    restarts: number;
  };
  rollout?: { sent: number; failed: number; detail: string };
  /** The upgrade case (local runner): the previous release's replicas replaced by this release's. */
  upgrade?: {
    from: string;
    to: string;
    /** Written through the proxy before the upgrade. */
    posts: number;
    votes: number;
    /** db_migrations_applied of each replica before and after. */
    migrationsBefore: number[];
    migrationsAfter: number[];
    sent: number;
    failed: number;
    /** Failed requests by kind and status. */
    failedBy: Record<string, number>;
    byRequest: Record<string, number>;
    detail: string;
    upgradeMs: number;
    /** From the end of the rollout until every replica reports the backfill finished. */
    backfillDoneMs: number;
  };
  /** Case 10: writes while the primary is killed (CloudNativePG topology only). */
  failover?: {
    sent: number;
    acknowledged: number;
    missing: number;
    /** 503 problem+json from the service, and 503 pages of the proxy (no ready replica). */
    unavailable: number;
    fromProxy: number;
    writesBackMs: number;
  };
  /** Case 12 (local runner, the Barman Cloud plugin's stand-in): a mistake recovered to just before it. */
  backup?: {
    /** Acknowledged through the proxy before the base backup, between it and the mistake, after the mistake. */
    written: { beforeBackup: number; afterBackup: number; afterMistake: number };
    backupId: string;
    backupMs: number;
    deleted: number;
    recovered: string;
    sourceServerName: string;
    serverName: string;
    targetTime: string;
    downloadMs: number;
    replayMs: number;
    /** From the service's move to the recovered Cluster until it answered through the proxy. */
    servingMs: number;
    /** Of the writes acknowledged before the mistake, read back through the proxy; those after it, absent. */
    present: number;
    absentAfterMistake: number;
    archivedWal: string;
  };
  /** Case 11 (local runner only): the chart's alerts and dashboard queried in a real Prometheus. */
  metrics?: {
    prometheus: string;
    apiTargetsUp: number;
    kubeStateMetricsUp: boolean;
    load: { sent: number; statuses: Record<string, number> };
    variables: string;
    panels: { panel: string; refId: string; series: number; note?: string }[];
    alerts: {
      alert: string;
      /** Each expression without its threshold comparisons, and the series it returned. */
      inner: { expr: string; series: number }[];
      /** Why an empty inner expression is expected here, when it is. */
      note?: string;
      /** Series of the whole expression (the alert's condition) at the time of asking. */
      firing: number;
    }[];
  };
  /** Written by the local runner: what ran the replicas, their start-up and memory. */
  runtime?: {
    launcher: string;
    memoryLimitBytes?: number;
    replicas: {
      name: string;
      database: 'empty' | 'migrated';
      image?: string;
      startToReadyMs: number;
      launchToReadyMs: number;
      memory?: { peakRssBytes: number; cgroupPeakBytes?: number };
      exit?: number | string;
    }[];
  };
}

const mib = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(0)} MiB`;

function row(what: string, result: string): string {
  return `| ${what.padEnd(34)} | ${result}`;
}

/** The proxy's own answers: rate limits, the bypass attempts, CORS. */
function proxyRows({ rateLimit, general, bypass, cors }: Report): string[] {
  const lines: string[] = [];
  if (rateLimit) {
    lines.push(
      row(
        'rate limit: rapid /login + /users/',
        `${rateLimit.passed} passed, then ${rateLimit.limited} x 429`,
      ),
    );
    lines.push(row('429s answered by the proxy', `${rateLimit.limitedByProxy} of ${rateLimit.limited}`));
    lines.push(
      row(
        'refill',
        `after ${(rateLimit.refillWaitMs / 1000).toFixed(1)} s one passed (${rateLimit.refillAnswer})`,
      ),
    );
  }
  if (general)
    lines.push(row('general route, rapid reads', `${general.sent} sent, ${general.limited} x 429`));
  if (bypass) {
    for (const attempt of bypass)
      lines.push(
        row(`bypass POST ${attempt.path}`, `login form ${attempt.login}, registration ${attempt.register}`),
      );
  }
  if (cors) lines.push(row('CORS', `${cors.allowed} allowed; ${cors.foreign} refused`));
  return lines;
}

/** A stopped and restarted database, as the probes and the API saw it. */
function databaseRows({ database }: Report): string[] {
  const lines: string[] = [];
  if (database) {
    lines.push(row('database stopped: ready 503 after', `${(database.readyDownMs / 1000).toFixed(1)} s`));
    lines.push(row('  /healthz/live meanwhile', database.liveDuringOutage.join(', ')));
    lines.push(row('database started: ready 200 after', `${(database.readyBackMs / 1000).toFixed(1)} s`));
    lines.push(
      row('  10 API answers in a row after', `${(database.servingBackMs / 1000).toFixed(1)} s more`),
    );
    lines.push(row('  API restarts', String(database.restarts)));
  }
  return lines;
}

/** Requests during a rollout. */
function rolloutRows({ rollout }: Report): string[] {
  const lines: string[] = [];
  if (rollout) {
    lines.push(row('rollout: requests during it', `${rollout.sent} sent, ${rollout.failed} failed`));
    lines.push(row('  rollout', rollout.detail));
  }
  return lines;
}

/** The upgrade from the previous release under load. */
function upgradeRows({ upgrade }: Report): string[] {
  const lines: string[] = [];
  if (upgrade) {
    const kinds = Object.entries(upgrade.byRequest)
      .map(([kind, count]) => `${count} ${kind}`)
      .join(', ');
    lines.push(
      row(
        'upgrade: requests during it',
        `${upgrade.from} -> ${upgrade.to} in ${(upgrade.upgradeMs / 1000).toFixed(1)} s: ${upgrade.sent} sent (${kinds}), ${upgrade.failed} failed`,
      ),
    );
    lines.push(row('  rollout', upgrade.detail));
    if (upgrade.failed > 0)
      lines.push(
        row(
          '  failed',
          Object.entries(upgrade.failedBy)
            .map(([kind, count]) => `${count} ${kind}`)
            .join(', '),
        ),
      );
    lines.push(
      row(
        '  migrations applied',
        `${upgrade.migrationsBefore.join(', ')} before (per replica), ${upgrade.migrationsAfter.join(', ')} after`,
      ),
    );
    lines.push(
      row(
        '  written before, read after',
        `${upgrade.posts} posts with ${upgrade.votes} votes, all as written`,
      ),
    );
    lines.push(
      row(
        '  vote count backfill finished',
        `${(upgrade.backfillDoneMs / 1000).toFixed(1)} s after the rollout`,
      ),
    );
  }
  return lines;
}

/** Writes across a failover. */
function failoverRows({ failover }: Report): string[] {
  const lines: string[] = [];
  if (failover) {
    lines.push(
      row(
        'failover: writes meanwhile',
        `${failover.sent} sent, ${failover.acknowledged} acknowledged (${failover.missing} missing after), ${failover.unavailable} x 503 from the service, ${failover.fromProxy} from the proxy`,
      ),
    );
    lines.push(row('  writes back after the kill', `${(failover.writesBackMs / 1000).toFixed(1)} s`));
  }
  return lines;
}

/** A backup, a mistake and the recovery to just before it. */
function backupRows({ backup }: Report): string[] {
  const lines: string[] = [];
  if (backup) {
    const { written } = backup;
    lines.push(
      row(
        'backup: writes, base backup, mistake',
        `${written.beforeBackup} + ${written.afterBackup} acknowledged around base backup ${backup.backupId} (${(backup.backupMs / 1000).toFixed(1)} s), then DELETE FROM posts (${backup.deleted} rows) at ${backup.targetTime}, then ${written.afterMistake} more`,
      ),
    );
    lines.push(
      row(
        '  recovered to just before it',
        `${backup.recovered} from ${backup.sourceServerName}: download ${(backup.downloadMs / 1000).toFixed(1)} s, replay ${(backup.replayMs / 1000).toFixed(1)} s; serving through the proxy ${(backup.servingMs / 1000).toFixed(1)} s after the move`,
      ),
    );
    lines.push(
      row(
        '  read back through the proxy',
        `${backup.present} of ${written.beforeBackup + written.afterBackup} written before the mistake; ${backup.absentAfterMistake} of ${written.afterMistake} written after it absent`,
      ),
    );
    lines.push(
      row('  the recovered Cluster archives to', `${backup.serverName} (${backup.archivedWal} shipped)`),
    );
  }
  return lines;
}

/** Prometheus, the dashboard's queries and the alerts' expressions. */
function metricsRows({ metrics }: Report): string[] {
  const lines: string[] = [];
  if (metrics) {
    const statuses = Object.entries(metrics.load.statuses)
      .map(([status, count]) => `${status}: ${count}`)
      .join(', ');
    lines.push(
      row(
        'metrics: Prometheus scraping',
        `${metrics.prometheus}; ${metrics.apiTargetsUp} API targets up, kube-state-metrics ${metrics.kubeStateMetricsUp ? 'up' : 'DOWN'}`,
      ),
    );
    lines.push(row('  load through the proxy', `${metrics.load.sent} requests (${statuses})`));
    lines.push(row('  dashboard variables', metrics.variables));
    const withData = metrics.panels.filter((p) => p.series > 0);
    const counts = metrics.panels.map((p) => p.series);
    lines.push(
      row(
        '  dashboard panel queries',
        `${withData.length} of ${metrics.panels.length} returned series (${Math.min(...counts)} to ${Math.max(...counts)} each)`,
      ),
    );
    for (const panel of metrics.panels.filter((p) => p.series === 0))
      lines.push(
        row(`    empty: ${panel.panel}`, `query ${panel.refId}${panel.note ? `: ${panel.note}` : ''}`),
      );
    for (const alert of metrics.alerts) {
      const inner = alert.inner.map((i) => String(i.series)).join(', ');
      const condition = alert.firing > 0 ? `condition true for ${alert.firing}` : 'condition false (quiet)';
      lines.push(
        row(
          `  ${alert.alert}`,
          `${alert.inner.filter((i) => i.series > 0).length} of ${alert.inner.length} inner expressions with series (${inner})${alert.note ? `, ${alert.note}` : ''}; ${condition}`,
        ),
      );
    }
  }
  return lines;
}

/** How each replica ran and started. */
function runtimeRows({ runtime }: Report): string[] {
  const lines: string[] = [];
  if (runtime) {
    lines.push(row('replicas ran as', runtime.launcher));
    const limit = runtime.memoryLimitBytes ? ` of the ${mib(runtime.memoryLimitBytes)} limit` : '';
    for (const replica of runtime.replicas) {
      const memory = replica.memory
        ? `, peak RSS ${mib(replica.memory.peakRssBytes)}${
            replica.memory.cgroupPeakBytes ? ` (cgroup peak ${mib(replica.memory.cgroupPeakBytes)})` : ''
          }${limit}`
        : '';
      lines.push(
        row(
          `  ${replica.name}`,
          `ready ${(replica.startToReadyMs / 1000).toFixed(1)} s after start, ${(replica.launchToReadyMs / 1000).toFixed(1)} s after launch (${replica.database} database${replica.image ? `, ${replica.image}` : ''})${memory}`,
        ),
      );
    }
  }
  return lines;
}

export function formatReport(report: Report): string {
  const lines = [
    `Proof table (${report.target})`,
    row('what', 'observed'),
    row('-'.repeat(34), '-'.repeat(40)),
  ];
  const statuses = Object.entries(report.statuses)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, count]) => `${status}: ${count}`)
    .join(', ');
  lines.push(row('requests sent through the ingress', `${report.requests} (${statuses})`));
  for (const rows of [
    proxyRows,
    databaseRows,
    rolloutRows,
    upgradeRows,
    failoverRows,
    backupRows,
    metricsRows,
    runtimeRows,
  ])
    lines.push(...rows(report));
  return lines.join('\n');
}

export function readReport(file: string): Report {
  return JSON.parse(readFileSync(file, 'utf8')) as Report;
}

if (require.main === module) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: tsx k8s-tests/report.ts <report.json>');
  process.stdout.write(`${formatReport(readReport(file))}\n`);
}
