/**
 * The PrometheusRule (metrics.prometheusRule): valid against the Prometheus Operator's CRD, its
 * rules accepted by promtool (`check rules`), and each alert proven with promtool's unit tests
 * (tests/chart/alerts/prod.test.yaml: every alert firing on series that break it, every alert
 * quiet on healthy ones and on other releases' series). promtool is Debian's `prometheus` package;
 * without it these tests fail (they never skip).
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parse, stringify } from 'yaml';
import { alertRules, metricNames, type PrometheusRuleObject } from '../../tools/harness/promql';
import { chartDir, findAll, must, render, renderEnvironment, refusedEach, type RenderOptions } from './helm';

const PROMTOOL = process.env.PROMTOOL_BIN ?? 'promtool';
const unitTests = resolve(__dirname, 'alerts', 'prod.test.yaml');
const readme = readFileSync(resolve(chartDir, 'README.md'), 'utf8');

/** Every alert the chart can render, each with its runbook heading in chart/README.md. */
const ALERTS = [
  'SocialPostsHighErrorRatio',
  'SocialPostsHighLatency',
  'SocialPostsNoReadyReplica',
  'SocialPostsReplicasNotReady',
  'SocialPostsDatabasePoolSaturated',
  'SocialPostsDatabasePoolWaiting',
  'SocialPostsStartupFailing',
  'SocialPostsSchemaBehind',
  'SocialPostsRestarting',
  'SocialPostsMemoryNearLimit',
  'SocialPostsRateLimited',
  'SocialPostsMetricsAbsent',
  'SocialPostsDatabaseWALArchivingFailing',
  'SocialPostsDatabaseBackupTooOld',
  'SocialPostsDatabaseRecoveryWindowShort',
  'SocialPostsDatabaseReplicationLag',
  'SocialPostsDatabaseNoSynchronousStandby',
  'SocialPostsDatabaseVolumeFilling',
  'SocialPostsPoolerClientsWaiting',
];

/** The alerts on CloudNativePG's, the plugin's and kubelet's series, and which values render them. */
const DATABASE_ALERTS = ALERTS.filter((alert) => /^SocialPosts(Database(?!Pool)|Pooler)/.test(alert));
const BACKUP_ALERTS = [
  'SocialPostsDatabaseWALArchivingFailing',
  'SocialPostsDatabaseBackupTooOld',
  'SocialPostsDatabaseRecoveryWindowShort',
];

function promtool(args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((resolvePromise, reject) => {
    execFile(PROMTOOL, args, { cwd }, (error, stdout, stderr) => {
      if (error && (error as NodeJS.ErrnoException).code === 'ENOENT') {
        reject(new Error(`${PROMTOOL} is not installed: apt-get install prometheus (or set PROMTOOL_BIN)`));
        return;
      }
      resolvePromise({ code: error ? Number(error.code ?? 1) : 0, out: stdout + stderr });
    });
  });
}

async function ruleOf(options: RenderOptions): Promise<PrometheusRuleObject> {
  const rules = findAll(await render(options), 'PrometheusRule');
  expect(rules).toHaveLength(1);
  return must(rules[0], 'PrometheusRule');
}

const prodWith = (set: Record<string, string>, extra: Partial<RenderOptions> = {}): RenderOptions => ({
  values: ['values-prod.yaml'],
  namespace: 'social-posts-prod',
  set,
  ...extra,
});

describe('PrometheusRule of prod, checked and unit-tested with promtool', () => {
  let rule: PrometheusRuleObject;
  let dir: string;

  beforeAll(async () => {
    rule = must(findAll(await renderEnvironment('prod'), 'PrometheusRule')[0], 'the prod PrometheusRule');
    // The rules file Prometheus would load: the Operator writes spec.groups as it is.
    dir = mkdtempSync(join(tmpdir(), 'social-posts-alerts-'));
    writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: rule.spec.groups }));
    copyFileSync(unitTests, join(dir, 'prod.test.yaml'));
  });

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('When the prod values are rendered, then it holds every alert, once, with a severity and a runbook section of chart/README.md', () => {
    const rules = alertRules(rule);
    expect(rules.map((r) => r.alert)).toEqual(ALERTS);
    for (const r of rules) {
      expect(r.labels?.severity).toMatch(/^(critical|warning)$/);
      expect(r.annotations?.summary).toBeTruthy();
      expect(r.annotations?.description).toBeTruthy();
      const anchor = r.alert.toLowerCase();
      expect(r.annotations?.runbook).toBe(`chart/README.md#${anchor}`);
      // The heading whose anchor that is: one runbook line follows it.
      expect(readme).toMatch(
        new RegExp(
          `\\n#### ${r.alert}\\n\\n\\*\\*Means\\*\\*[^\\n]+\\*\\*Check first\\*\\*[^\\n]+\\*\\*Do\\*\\*`,
        ),
      );
    }
  });

  it("When the prod values are rendered, then every selector of the service's own metrics names this release's job and namespace", () => {
    for (const r of alertRules(rule)) {
      for (const selector of r.expr.match(/\b(http_|db_|process_|nodejs_|up\{)[^}]*\}/g) ?? [])
        expect(selector).toContain('job="social-posts", namespace="social-posts-prod"');
      for (const selector of r.expr.match(/\bkube_[a-z_]+\{[^}]*\}/g) ?? [])
        expect(selector).toContain('namespace="social-posts-prod"');
      expect(metricNames(r.expr).length).toBeGreaterThan(0);
    }
  });

  it("When the prod values are rendered, then every database selector names this release's namespace and its Cluster's or Pooler's pods", () => {
    const rules = alertRules(rule).filter((r) => DATABASE_ALERTS.includes(r.alert));
    expect(rules.map((r) => r.alert)).toEqual(DATABASE_ALERTS);
    for (const r of rules) {
      const selectors = r.expr.match(/\b(cnpg|barman|kubelet)_[a-z_]+\{[^}]*\}/g) ?? [];
      expect([r.alert, selectors.length > 0]).toEqual([r.alert, true]);
      for (const selector of selectors)
        expect([r.alert, selector]).toEqual([
          r.alert,
          expect.stringMatching(
            /namespace="social-posts-prod", (pod=~"social-posts-db-\[0-9\]\+"|persistentvolumeclaim=~"social-posts-db-\[0-9\]\+\(-wal\)\?"|pod=~"\(social-posts-db-pooler-rw\|social-posts-db-pooler-ro\)-\[a-z0-9\]\+-\[a-z0-9\]\+")/,
          ),
        ]);
    }
  });

  it('When promtool checks the rendered rules, then it finds all of them and no problem', async () => {
    const { code, out } = await promtool(['check', 'rules', 'rules.yaml'], dir);
    expect(out).toContain(`SUCCESS: ${ALERTS.length} rules found`);
    expect(code).toBe(0);
  });

  it('When promtool runs tests/chart/alerts/prod.test.yaml, then each alert fires on its breaking series and stays quiet on healthy ones', async () => {
    const { code, out } = await promtool(['test', 'rules', 'prod.test.yaml'], dir);
    expect(out).toContain('SUCCESS');
    expect(code).toBe(0);
    // The backup alerts' cases run a day and more of evaluations.
  }, 240_000);

  it('When tests/chart/alerts/prod.test.yaml is read, then it has a firing case and a quiet case for every alert', () => {
    interface UnitTests {
      tests: { alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[] }[];
    }
    const cases = (parse(readFileSync(unitTests, 'utf8')) as UnitTests).tests.flatMap(
      (test) => test.alert_rule_test ?? [],
    );
    for (const alert of ALERTS) {
      const of = cases.filter((c) => c.alertname === alert);
      expect([alert, of.some((c) => (c.exp_alerts ?? []).length > 0)]).toEqual([alert, true]);
      expect([alert, of.some((c) => (c.exp_alerts ?? []).length === 0)]).toEqual([alert, true]);
    }
  });
});

describe('PrometheusRule options', () => {
  it('When labels, alert labels and a runbook base URL are given, then the object, every alert and every runbook_url carry them', async () => {
    const rule = await ruleOf(
      prodWith({
        'metrics.prometheusRule.labels.release': 'kube-prometheus-stack',
        'metrics.prometheusRule.alertLabels.team': 'posts',
        'metrics.prometheusRule.runbookBaseUrl':
          'https://git.example.com/social-posts/blob/main/chart/README.md',
      }),
    );
    expect(rule.metadata.labels).toMatchObject({ release: 'kube-prometheus-stack' });
    for (const r of alertRules(rule)) {
      expect(r.labels).toMatchObject({ team: 'posts' });
      expect(r.annotations?.runbook_url).toBe(
        `https://git.example.com/social-posts/blob/main/chart/README.md#${r.alert.toLowerCase()}`,
      );
    }
  });

  it('When thresholds, durations and severities are changed, then the expressions follow them; a disabled alert is left out', async () => {
    const rule = await ruleOf(
      prodWith(
        {
          'metrics.prometheusRule.errorRatio.for': '2m',
          'metrics.prometheusRule.errorRatio.severity': 'page',
          'metrics.prometheusRule.rateWindow': '10m',
          'metrics.prometheusRule.restarts.window': '1h',
          'metrics.prometheusRule.memory.enabled': 'false',
        },
        // --set leaves decimals as strings; --set-json gives numbers.
        {
          setJson: {
            'metrics.prometheusRule.errorRatio.threshold': 0.01,
            'metrics.prometheusRule.latency.thresholdSeconds': 0.5,
          },
        },
      ),
    );
    const byName = Object.fromEntries(alertRules(rule).map((r) => [r.alert, r]));
    expect(byName.SocialPostsHighErrorRatio?.expr).toContain('> 0.01');
    expect(byName.SocialPostsHighErrorRatio?.expr).toContain('[10m]');
    expect(byName.SocialPostsHighErrorRatio?.for).toBe('2m');
    expect(byName.SocialPostsHighErrorRatio?.labels?.severity).toBe('page');
    expect(byName.SocialPostsHighLatency?.expr).toContain('> 0.5');
    expect(byName.SocialPostsRestarting?.expr).toContain('[1h]');
    expect(byName.SocialPostsMemoryNearLimit).toBeUndefined();
  });

  it('When another release name and namespace render the rule, then every selector follows them', async () => {
    const rule = await ruleOf(prodWith({ fullnameOverride: 'posts-eu' }, { namespace: 'eu' }));
    const exprs = alertRules(rule)
      .map((r) => r.expr)
      .join('\n');
    expect(exprs).not.toContain('social-posts-prod');
    expect(exprs).toContain('job="posts-eu", namespace="eu"');
    expect(exprs).toContain('deployment="posts-eu"');
    expect(exprs).toContain('pod=~"posts-eu-[a-z0-9]+-[a-z0-9]+", container="social-posts"');
    expect(exprs).toContain('ingress="posts-eu-auth"');
    expect(exprs).toContain('namespace="eu", pod=~"posts-eu-db-[0-9]+"');
    expect(exprs).toContain(
      'namespace="eu", pod=~"(posts-eu-db-pooler-rw|posts-eu-db-pooler-ro)-[a-z0-9]+-[a-z0-9]+"',
    );
  });

  it('When backups, the Pooler or the standbys are off, then their alerts are left out (their series would not exist)', async () => {
    const names = async (set: Record<string, string>) =>
      alertRules(await ruleOf(prodWith(set))).map((r) => r.alert);
    const noBackup = await names({ 'backup.enabled': 'false' });
    expect(noBackup).toEqual(ALERTS.filter((alert) => !BACKUP_ALERTS.includes(alert)));
    expect(await names({ 'backup.walArchiving': 'false' })).not.toContain(
      'SocialPostsDatabaseWALArchivingFailing',
    );
    const noPooler = { 'cnpg.pooler.enabled': 'false', 'autoscaling.maxReplicas': '5' };
    expect(await names({ ...noPooler, 'cnpg.reads.pooler.enabled': 'false' })).not.toContain(
      'SocialPostsPoolerClientsWaiting',
    );
    // The ro Pooler alone still has PgBouncers whose clients may wait.
    expect(await names(noPooler)).toContain('SocialPostsPoolerClientsWaiting');
    expect(await names({ 'cnpg.cluster.instances': '1' })).not.toContain(
      'SocialPostsDatabaseNoSynchronousStandby',
    );
    const withoutCnpg = alertRules(
      await ruleOf({
        values: ['values-dev.yaml'],
        set: { 'metrics.serviceMonitor.enabled': 'true', 'metrics.prometheusRule.enabled': 'true' },
      }),
    ).map((r) => r.alert);
    expect(withoutCnpg.filter((alert) => DATABASE_ALERTS.includes(alert))).toEqual([]);
  });

  it('When the database thresholds change, then the expressions follow them', async () => {
    const rule = await ruleOf(
      prodWith(
        {
          'metrics.prometheusRule.walArchiving.readySegments': '50',
          'metrics.prometheusRule.backupAge.maxAgeHours': '8',
          'metrics.prometheusRule.recoveryWindow.minHours': '168',
          'cnpg.cluster.synchronous.number': '2',
        },
        { setJson: { 'metrics.prometheusRule.volumeFilling.threshold': 0.9 } },
      ),
    );
    const byName = Object.fromEntries(alertRules(rule).map((r) => [r.alert, r]));
    expect(byName.SocialPostsDatabaseWALArchivingFailing?.expr).toMatch(/value="ready"\}\)\n> 50$/);
    expect(byName.SocialPostsDatabaseBackupTooOld?.expr).toContain('> 28800');
    expect(byName.SocialPostsDatabaseRecoveryWindowShort?.expr).toContain('< 604800');
    expect(byName.SocialPostsDatabaseNoSynchronousStandby?.expr).toContain('< 2');
    expect(byName.SocialPostsDatabaseVolumeFilling?.expr).toContain('> 0.9');
  });

  it('When the Gateway API path replaces the Ingress objects, then there is no ingress-nginx refusal alert (its metrics would not exist)', async () => {
    const rule = await ruleOf(
      prodWith({
        'gateway.enabled': 'true',
        'gateway.parentRef.name': 'public',
        'gateway.parentRef.namespace': 'gateway',
      }),
    );
    expect(alertRules(rule).map((r) => r.alert)).not.toContain('SocialPostsRateLimited');
    expect(alertRules(rule)).toHaveLength(ALERTS.length - 1);
  });

  refusedEach<Record<string, string>>([
    // The rules select by the job label the ServiceMonitor gives.
    [
      'metrics.prometheusRule on without the ServiceMonitor',
      { 'metrics.serviceMonitor.enabled': 'false' },
      'metrics.prometheusRule.enabled needs metrics.serviceMonitor.enabled',
    ],
    [
      'a duration that is not one',
      { 'metrics.prometheusRule.errorRatio.for': 'five minutes' },
      '/metrics/prometheusRule/errorRatio/for',
    ],
    [
      'a ratio above 1',
      { 'metrics.prometheusRule.errorRatio.threshold': '5' },
      '/metrics/prometheusRule/errorRatio/threshold',
    ],
    [
      'an unknown key',
      { 'metrics.prometheusRule.latency.p95': '1' },
      "additional properties 'p95' not allowed",
    ],
    [
      'a namespace label that is not a label name',
      { 'metrics.prometheusRule.rateLimited.namespaceLabel': 'exported-namespace' },
      '/metrics/prometheusRule/rateLimited/namespaceLabel',
    ],
  ])('When the values carry %s, then helm template refuses it', (set) => prodWith(set));
});
