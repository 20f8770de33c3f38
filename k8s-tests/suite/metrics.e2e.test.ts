/**
 * Case 11: the chart's alerts and dashboard against a real Prometheus. The local runner renders
 * the ServiceMonitor, PrometheusRule and dashboard (k8s-tests/values-e2e-metrics.yaml), runs
 * Debian's Prometheus scraping every replica's metrics port with the ServiceMonitor's target labels
 * and a kube-state-metrics stand-in (local/prometheus.ts), and passes K8S_PROMETHEUS_URL and the
 * rendered objects (K8S_RENDERED_FILE). This case puts requests through the proxy, then asks the
 * Prometheus HTTP API for every panel query (the dashboard's variables set to the release) and
 * every alert expression: the whole expression must be valid, and each part without its threshold
 * (tools/harness/promql.ts innerExpressions) must return series, except where the emulation cannot have
 * them (ingress-nginx's controller metrics; a waiting-reason series, which exists only while a
 * container is waiting). On kind (no Prometheus) it is skipped. It sends no token and no limited
 * path, so the rate-limit case's counter is untouched.
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeReport } from '../report';
import {
  alertRules,
  dashboardOf,
  grafanaQuery,
  innerExpressions,
  metricNames,
  panelQueries,
  type PrometheusRuleObject,
} from '../../tools/harness/promql';
import type { KubeObject } from '../../tools/harness/manifests';
import { send, tally } from './client';

const prometheusUrl = process.env.K8S_PROMETHEUS_URL;
const renderedFile = process.env.K8S_RENDERED_FILE;
const describeWithPrometheus = prometheusUrl && renderedFile ? describe : describe.skip;

type Rendered = KubeObject & { data?: Record<string, string> };

interface QueryAnswer {
  status: string;
  error?: string;
  data?: { resultType: string; result: { metric: Record<string, string>; value?: [number, string] }[] };
}

async function query(expr: string): Promise<QueryAnswer> {
  const url = new URL('/api/v1/query', prometheusUrl);
  url.searchParams.set('query', expr);
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  return (await res.json()) as QueryAnswer;
}

/** Series of a query; fails with Prometheus' own error when the query is not valid. */
async function series(expr: string): Promise<number> {
  const answer = await query(expr);
  if (answer.status !== 'success') throw new Error(`${answer.error ?? answer.status}: ${expr}`);
  return answer.data?.result.length ?? 0;
}

/** Metrics the emulation has no series of, and why. */
const NOT_HERE: Record<string, string> = {
  nginx_ingress_controller_requests:
    "ingress-nginx's controller metrics are not emulated (promtool tests the rule)",
  kube_pod_container_status_waiting_reason: 'no container waiting (the series exists only while one is)',
  // Reads on standbys (case 13). This case's own anonymous reads make db_reads_total's series
  // wherever there is a read endpoint; the in-chart database has none.
  ...(process.env.K8S_STANDBY_READS === '1'
    ? {}
    : { db_reads_total: 'no read endpoint: the release does not read on standbys' }),
  db_read_fallbacks_total:
    'no read has fallen back to the primary since the replicas started (the rollout case replaces them after case 13)',
  db_standby_replay_lag_seconds:
    "no standby reachable: the in-chart database has none, and the failover case promotes the emulation's only one",
};
// The database's series come from exporters this runner does not run (promtool tests their rules).
const NOT_EMULATED: [RegExp, string][] = [
  [/^cnpg_/, "CloudNativePG's instance and PgBouncer exporters are not emulated"],
  [/^barman_cloud_/, "the Barman Cloud plugin's sidecar metrics are not emulated"],
  [/^kubelet_volume_stats_/, "the kubelet's volume statistics are not emulated"],
];
const notHere = (name: string): string | undefined =>
  NOT_HERE[name] ?? NOT_EMULATED.find(([pattern]) => pattern.test(name))?.[1];

describeWithPrometheus('Alerts and dashboard in a real Prometheus (local runner only)', () => {
  const objects = renderedFile ? (JSON.parse(readFileSync(renderedFile, 'utf8')) as Rendered[]) : [];
  const rule = objects.find((o) => o.kind === 'PrometheusRule') as PrometheusRuleObject | undefined;
  const configMap = objects.find(
    (o) => o.kind === 'ConfigMap' && o.metadata.labels?.grafana_dashboard === '1',
  );
  const monitor = objects.find((o) => o.kind === 'ServiceMonitor');
  const job = monitor?.metadata.name ?? '';
  const report = {
    prometheus: '',
    apiTargetsUp: 0,
    kubeStateMetricsUp: false,
    // The client's tally of this file's requests: the load below is all of them.
    load: tally,
    variables: '',
    panels: [] as { panel: string; refId: string; series: number; note?: string }[],
    alerts: [] as {
      alert: string;
      inner: { expr: string; series: number }[];
      firing: number;
      note?: string;
    }[],
  };
  let namespace = '';

  afterAll(() => {
    writeReport('metrics', report);
  });

  it('When the chart is rendered for the run, then it has a ServiceMonitor, a PrometheusRule and the dashboard ConfigMap', async () => {
    expect(monitor).toBeDefined();
    expect(rule).toBeDefined();
    expect(configMap).toBeDefined();
    const build = (await (await fetch(new URL('/api/v1/status/buildinfo', prometheusUrl))).json()) as {
      data: { version: string };
    };
    report.prometheus = `Prometheus ${build.data.version}`;
  });

  it('When requests go through the proxy, then Prometheus scrapes every replica with the ServiceMonitor labels and sees them', async () => {
    // Reads, a missing post, an unmatched path and a write without a token: 200, 404, 404, 401.
    const paths: [string, string][] = [
      ['GET', '/posts/public'],
      ['GET', '/posts/public?limit=5'],
      ['GET', '/posts/999999999'],
      ['GET', '/no-such-path'],
      ['POST', '/posts/'],
    ];
    for (let round = 0; round < 12; round++)
      for (const [method, path] of paths)
        await send(
          method,
          path,
          method === 'POST' ? { body: '{}', headers: { 'Content-Type': 'application/json' } } : {},
        );
    expect(report.load.statuses['200']).toBeGreaterThan(0);
    // Two scrapes after the last request, and every running replica up.
    await sleep(3000);
    const up = await query(`up{job="${job}"}`);
    const targets = up.data?.result ?? [];
    expect(targets.length).toBeGreaterThan(0);
    for (const target of targets) expect(target.value?.[1]).toBe('1');
    report.apiTargetsUp = targets.length;
    namespace = targets[0]?.metric.namespace ?? '';
    expect(targets[0]?.metric).toMatchObject({ job, service: job, endpoint: 'metrics' });
    report.kubeStateMetricsUp = (await series('up{job="kube-state-metrics"} == 1')) === 1;
    expect(report.kubeStateMetricsUp).toBe(true);
    expect(
      await series(`http_request_duration_seconds_count{job="${job}", namespace="${namespace}"}`),
    ).toBeGreaterThan(0);
  });

  it("When the dashboard's variable queries run, then they list the release's namespace and job", async () => {
    const values = async (labelName: string, match: string) => {
      const url = new URL(`/api/v1/label/${labelName}/values`, prometheusUrl);
      url.searchParams.set('match[]', match);
      return ((await (await fetch(url)).json()) as { data: string[] }).data;
    };
    expect(await values('namespace', 'http_requests_in_flight')).toContain(namespace);
    expect(await values('job', `http_requests_in_flight{namespace="${namespace}"}`)).toContain(job);
    report.variables = `namespace ${namespace} and job ${job} listed by label_values(http_requests_in_flight, …)`;
  });

  it('When every dashboard panel query is asked with the variables set, then each returns series', async () => {
    const queries = panelQueries(dashboardOf(configMap ?? {}));
    expect(queries.length).toBeGreaterThan(20);
    const unexplained: string[] = [];
    for (const q of queries) {
      const expr = grafanaQuery(q.expr, { namespace, job }, '1m');
      const count = await series(expr);
      const reasons = metricNames(expr).map(notHere);
      const why = reasons.every((reason) => reason !== undefined) ? reasons[0] : undefined;
      report.panels.push({ panel: q.panel, refId: q.refId, series: count, ...(why ? { note: why } : {}) });
      if (count === 0 && !why) unexplained.push(`${q.panel} ${q.refId}`);
    }
    expect(unexplained).toEqual([]);
  });

  it('When every alert expression is asked, then it is valid and each part without its threshold returns series', async () => {
    const rules = alertRules(
      rule ?? { apiVersion: '', kind: '', metadata: { name: '' }, spec: { groups: [] } },
    );
    expect(rules.length).toBeGreaterThan(10);
    const missing: string[] = [];
    for (const r of rules) {
      const firing = await series(r.expr);
      const inner: { expr: string; series: number }[] = [];
      const notes = new Set<string>();
      for (const expr of innerExpressions(r.expr)) {
        const count = await series(expr);
        inner.push({ expr, series: count });
        const why = metricNames(expr)
          .map(notHere)
          .find((reason) => reason !== undefined);
        if (why) notes.add(why);
        else if (count === 0) missing.push(`${r.alert}: ${expr}`);
      }
      report.alerts.push({
        alert: r.alert,
        inner,
        firing,
        ...(notes.size ? { note: [...notes].join('; ') } : {}),
      });
    }
    expect(missing).toEqual([]);
  });
});
