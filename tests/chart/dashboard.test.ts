/**
 * The Grafana dashboard (metrics.dashboard): chart/dashboards/social-posts.json in a ConfigMap for
 * Grafana's dashboard sidecar, with a uid and title of the release and the release as the default
 * of its namespace and job variables. Its queries are parsed with Prometheus' grammar here;
 * metric-names.test.ts checks the names against the service, k8s:local runs them in Prometheus.
 */
import { readFileSync } from 'node:fs';
import type { IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { resolve } from 'node:path';
import {
  dashboardOf,
  grafanaQuery,
  metricNames,
  panelQueries,
  type Dashboard,
} from '../../tools/harness/promql';
import { chartDir, findAll, findOne, must, render, renderEnvironment } from './helm';

const isDashboard = (configMap: IConfigMap) => configMap.metadata?.name?.endsWith('-dashboard') ?? false;

const file = JSON.parse(
  readFileSync(resolve(chartDir, 'dashboards', 'social-posts.json'), 'utf8'),
) as Dashboard;

describe('Grafana dashboard', () => {
  it('When the prod values are rendered, then one ConfigMap carries the sidecar label and the dashboard of the file, named for the release', async () => {
    const configMaps = findAll(await renderEnvironment('prod'), 'ConfigMap').filter(isDashboard);
    expect(configMaps).toHaveLength(1);
    const configMap = must(configMaps[0], 'dashboard ConfigMap');
    expect(configMap.metadata?.labels).toMatchObject({ grafana_dashboard: '1' });
    expect(configMap.metadata?.annotations).toBeUndefined();
    // One key per release: the sidecar writes every key into one folder.
    expect(Object.keys(configMap.data ?? {})).toEqual(['social-posts-social-posts-prod.json']);
    const dashboard = dashboardOf(configMap);
    expect(dashboard.title).toBe('Social Posts (social-posts-prod/social-posts)');
    expect(dashboard.uid).toMatch(/^social-posts-[0-9a-f]{12}$/);
    expect(dashboard.uid.length).toBeLessThanOrEqual(40);
    expect(dashboard.panels).toEqual(file.panels);
    const variables = Object.fromEntries(dashboard.templating.list.map((v) => [v.name, v]));
    expect(variables.datasource).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(variables.namespace?.current).toMatchObject({ value: 'social-posts-prod' });
    expect(variables.job?.current).toMatchObject({ value: 'social-posts' });
    expect(variables.cluster?.current).toMatchObject({ value: 'social-posts-db' });
    expect(variables.pooler?.current).toMatchObject({ value: 'social-posts-db-pooler-rw' });
  });

  it('When two releases render the dashboard, then their uids differ (one Grafana holds both)', async () => {
    const uid = async (namespace: string) =>
      dashboardOf(
        findOne(await render({ values: ['values-prod.yaml'], namespace }), 'ConfigMap', isDashboard),
      ).uid;
    expect(await uid('posts-a')).not.toBe(await uid('posts-b'));
  });

  it('When the label, its value and a folder are set, then the ConfigMap carries them as the sidecar reads them', async () => {
    const objects = await render({
      values: ['values-dev.yaml'],
      set: {
        'metrics.dashboard.enabled': 'true',
        'metrics.dashboard.label': 'dashboards',
        'metrics.dashboard.labelValue': 'social',
        'metrics.dashboard.folder': 'Applications',
        'metrics.dashboard.folderAnnotation': 'k8s-sidecar-target-directory',
      },
    });
    const configMap = findOne(objects, 'ConfigMap', isDashboard);
    expect(configMap.metadata?.labels).toMatchObject({ dashboards: 'social' });
    expect(configMap.metadata?.labels?.grafana_dashboard).toBeUndefined();
    expect(configMap.metadata?.annotations).toEqual({ 'k8s-sidecar-target-directory': 'Applications' });
  });

  it('When chart/dashboards/social-posts.json is read, then every panel and query uses the datasource variable and every query parses', () => {
    const queries = panelQueries(file);
    expect(queries.length).toBeGreaterThan(20);
    const walk = (panels: Dashboard['panels']): Dashboard['panels'] =>
      panels.flatMap((panel) => [panel, ...walk(panel.panels ?? [])]);
    for (const panel of walk(file.panels).filter((p) => p.type !== 'row')) {
      expect([panel.title, (panel as { datasource?: unknown }).datasource]).toEqual([
        panel.title,
        { type: 'prometheus', uid: '${datasource}' },
      ]);
      for (const target of panel.targets ?? [])
        expect((target as { datasource?: unknown }).datasource).toEqual({
          type: 'prometheus',
          uid: '${datasource}',
        });
    }
    for (const query of queries) {
      const expr = grafanaQuery(query.expr, { namespace: 'ns', job: 'social-posts' });
      expect([query.panel, metricNames(expr).length > 0]).toEqual([query.panel, true]);
      // Scoped to the dashboard's namespace: the service's own metrics by job as well.
      expect([query.panel, query.expr]).toEqual([
        query.panel,
        expect.stringContaining('namespace="$namespace"'),
      ]);
    }
  });

  it('When chart/dashboards/social-posts.json is read, then it has the panels an operator looks for', () => {
    const titles = panelQueries(file).map((q) => q.panel);
    for (const title of [
      'Request rate by route',
      'Errors: 5xx ratio',
      'Latency percentiles by route',
      'Pool connections',
      'Queries waiting for a connection',
      'Readiness',
      'Event-loop lag',
      'Memory',
      'Last base backup',
      'Recovery window',
      'Streaming standbys',
      'WAL archiving',
      'Replication lag',
      'Volume used',
      'PgBouncer clients waiting',
    ])
      expect(titles).toContain(title);
    // The database row selects this release's Cluster and Pooler by their pods' names.
    for (const q of panelQueries(file).filter((query) => /\b(cnpg|barman_cloud)_/.test(query.expr)))
      expect([q.panel, q.expr]).toEqual([
        q.panel,
        expect.stringMatching(/pod=~"\$cluster-\[0-9\]\+"|pod=~"\$pooler-\[a-z0-9\]\+-\[a-z0-9\]\+"/),
      ]);
    const latency = panelQueries(file).filter((q) => q.panel === 'Latency percentiles by route');
    expect(latency.map((q) => /histogram_quantile\((0\.\d+)/.exec(q.expr)?.[1])).toEqual([
      '0.5',
      '0.9',
      '0.99',
    ]);
    for (const q of latency) expect(q.expr).toContain('sum by (route, le)');
  });
});
