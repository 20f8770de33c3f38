/**
 * Every metric name an alert expression or a dashboard query of the chart uses is one the service
 * really exports (read from the /metrics of a running service: tools/harness/service.ts, the embedded
 * database, one request answered so the request histogram has series), or one of a short list of
 * other exporters' names that Kubernetes monitoring stacks have: kube-state-metrics, ingress-nginx's
 * controller, Prometheus' own `up`, kubelet's volume stats, and CloudNativePG's and its Barman Cloud
 * plugin's (each cited at its pinned version below). The names are read with Prometheus' grammar
 * (tools/harness/promql.ts), so a misspelt or renamed metric cannot hide in a query.
 */
import { startService, stopAll, type ServiceProcess } from '../../tools/harness/service';
import { alertRules, dashboardOf, grafanaQuery, metricNames, panelQueries } from '../../tools/harness/promql';
import { findOne, renderEnvironment } from './helm';

/** Names of other exporters the chart's queries may use; each must also be used (no stale entries). */
const OTHER_EXPORTERS: Record<string, string> = {
  kube_deployment_status_replicas_available: 'kube-state-metrics',
  kube_deployment_spec_replicas: 'kube-state-metrics',
  kube_pod_container_status_waiting_reason: 'kube-state-metrics',
  kube_pod_container_status_restarts_total: 'kube-state-metrics',
  kube_pod_container_resource_limits: 'kube-state-metrics',
  nginx_ingress_controller_requests: 'ingress-nginx controller',
  up: 'Prometheus (one per scrape target)',
  // CloudNativePG v1.30.0 (cloudnative-pg/cloudnative-pg, commit 4b5e244a7d031f67e025c83c1555e7726ecbbfa1):
  // docs/src/monitoring.md and the default queries of config/manager/default-monitoring.yaml.
  cnpg_pg_stat_archiver_last_failed_time: 'CloudNativePG default monitoring (pg_stat_archiver)',
  cnpg_pg_stat_archiver_last_archived_time: 'CloudNativePG default monitoring (pg_stat_archiver)',
  cnpg_pg_stat_archiver_seconds_since_last_archival: 'CloudNativePG default monitoring (pg_stat_archiver)',
  cnpg_pg_stat_archiver_failed_count: 'CloudNativePG default monitoring (pg_stat_archiver)',
  cnpg_collector_pg_wal_archive_status: 'CloudNativePG instance manager (docs/src/monitoring.md)',
  cnpg_pg_replication_lag: 'CloudNativePG default monitoring (pg_replication)',
  cnpg_pg_replication_streaming_replicas: 'CloudNativePG default monitoring (pg_replication)',
  cnpg_pg_replication_in_recovery: 'CloudNativePG default monitoring (pg_replication)',
  // CloudNativePG v1.30.0's PgBouncer exporter: docs/src/connection_pooling.md, "Monitoring".
  cnpg_pgbouncer_pools_cl_waiting: 'CloudNativePG PgBouncer exporter (SHOW POOLS)',
  cnpg_pgbouncer_pools_maxwait: 'CloudNativePG PgBouncer exporter (SHOW POOLS)',
  // The Barman Cloud plugin v0.14.0 (cloudnative-pg/plugin-barman-cloud, commit
  // 1e13020fe5f09fd8fc29ea03828f7b61375b3721): web/docs/observability.md, internal/cnpgi/instance/metrics.go.
  barman_cloud_cloudnative_pg_io_last_available_backup_timestamp: 'Barman Cloud plugin, on the instances',
  barman_cloud_cloudnative_pg_io_first_recoverability_point: 'Barman Cloud plugin, on the instances',
  kubelet_volume_stats_available_bytes: 'kubelet (volume stats of the claims)',
  kubelet_volume_stats_capacity_bytes: 'kubelet (volume stats of the claims)',
};

/**
 * The service's metrics of reads on standbys: a service without a read endpoint (this test's, on
 * its embedded database) registers them but has no sample of them (their series are per target,
 * reason and standby), so for these the exposition's `# TYPE` line is what shows they are exported.
 */
const WITHOUT_A_STANDBY = ['db_reads_total', 'db_read_fallbacks_total', 'db_standby_replay_lag_seconds'];

/** Names the exposition declares (`# TYPE <name> <type>`), sampled or not. */
function declaredNames(text: string): Set<string> {
  return new Set([...text.matchAll(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) /gm)].map((m) => m[1] ?? ''));
}

/** Sample names of the Prometheus text format (histograms as their _bucket, _sum and _count). */
function exportedNames(text: string): Set<string> {
  return new Set([...text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/gm)].map((m) => m[1] ?? ''));
}

describe('Metric names of the alerts and the dashboard', () => {
  let service: ServiceProcess;
  let exported: Set<string>;
  let declared: Set<string>;
  let used: Map<string, string[]>;

  beforeAll(async () => {
    const objects = await renderEnvironment('prod');
    used = new Map();
    const use = (name: string, where: string) => used.set(name, [...(used.get(name) ?? []), where]);
    const rule = findOne(objects, 'PrometheusRule');
    for (const r of alertRules(rule)) for (const name of metricNames(r.expr)) use(name, r.alert);
    const configMap = findOne(objects, 'ConfigMap', (c) => c.metadata?.labels?.grafana_dashboard === '1');
    for (const q of panelQueries(dashboardOf(configMap)))
      for (const name of metricNames(grafanaQuery(q.expr, { namespace: 'n', job: 'j' })))
        use(name, `panel ${q.panel}`);

    service = await startService({
      PATH: process.env.PATH,
      PORT: '0',
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
      NODE_ENV: 'development',
    });
    expect((await fetch(`${service.base}/posts/public`)).status).toBe(200);
    const scrape = await fetch(`http://127.0.0.1:${service.metricsPort}/metrics`);
    expect(scrape.status).toBe(200);
    const text = await scrape.text();
    exported = exportedNames(text);
    declared = declaredNames(text);
    for (const name of WITHOUT_A_STANDBY) if (declared.has(name)) exported.add(name);
  }, 120_000);

  afterAll(async () => {
    await stopAll();
  });

  it('When the running service is scraped, then it exports the request, pool, migration and process metrics', () => {
    for (const name of [
      'http_request_duration_seconds_bucket',
      'http_request_duration_seconds_count',
      'http_requests_in_flight',
      'db_pool_acquires_pending',
      'db_migrations_pending',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_p99_seconds',
    ])
      expect(exported).toContain(name);
  });

  it('When the running service is scraped without a read endpoint, then it still declares the metrics of reads on standbys', () => {
    for (const name of WITHOUT_A_STANDBY) expect([name, declared.has(name)]).toEqual([name, true]);
  });

  it("When the prod rule and dashboard are read, then every metric they use is exported by the service or listed as another exporter's", () => {
    expect(used.size).toBeGreaterThan(10);
    const unknown = [...used.entries()]
      .filter(([name]) => !exported.has(name) && !(name in OTHER_EXPORTERS))
      .map(([name, where]) => `${name} (${[...new Set(where)].join(', ')})`);
    expect(unknown).toEqual([]);
  });

  it("When the list of other exporters' names is read, then each is used and none is the service's own", () => {
    for (const name of Object.keys(OTHER_EXPORTERS)) {
      expect([name, used.has(name)]).toEqual([name, true]);
      expect([name, exported.has(name)]).toEqual([name, false]);
    }
  });
});
