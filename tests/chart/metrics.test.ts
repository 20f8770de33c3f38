import {
  apiContainer,
  apiSelector,
  configMapData,
  environments,
  findAll,
  findOne,
  namespaced,
  podAnnotations,
  render,
  renderedBeforeAll,
  renderEnvironment,
  valuesOf,
} from './helm';

describe.each(environments)('Metrics wiring of %s', (environment) => {
  const objects = renderedBeforeAll(() => renderEnvironment(environment));

  // The container's and the Service's ports named metrics are deployment.test.ts's.
  it(`When the ${environment} values are rendered, then METRICS_PORT is 9464, apart from PORT`, () => {
    const data = configMapData(objects);
    expect(data.METRICS_PORT).toBe('9464');
    expect(data.METRICS_PORT).not.toBe(data.PORT);
  });

  it(`When the ${environment} values are rendered, then every Ingress path routes to the http port and none to metrics`, () => {
    const backends = findAll(objects, 'Ingress').flatMap((ingress) =>
      (ingress.spec?.rules ?? []).flatMap((rule) =>
        (rule.http?.paths ?? []).map((entry) => entry.backend.service?.port),
      ),
    );
    expect(backends.length).toBeGreaterThan(0);
    for (const port of backends) expect(port).toEqual({ name: 'http' });
  });

  const monitored = environment === 'prod';
  it(`When the ${environment} values are rendered, then ${monitored ? 'a ServiceMonitor, a PrometheusRule and the dashboard ConfigMap exist' : 'there is no ServiceMonitor, PrometheusRule or dashboard'} and no scrape annotation (all opt-in; prod turns the Operator's on)`, () => {
    expect(findAll(objects, 'ServiceMonitor')).toHaveLength(monitored ? 1 : 0);
    expect(findAll(objects, 'PrometheusRule')).toHaveLength(monitored ? 1 : 0);
    expect(
      objects.filter((object) => object.metadata.labels?.grafana_dashboard === '1').map((o) => o.kind),
    ).toEqual(monitored ? ['ConfigMap'] : []);
    expect(Object.keys(podAnnotations(objects)).filter((key) => key.startsWith('prometheus.io/'))).toEqual(
      [],
    );
  });
});

describe('ServiceMonitor', () => {
  it('When metrics.serviceMonitor is enabled with labels, then one ServiceMonitor scrapes the metrics port of the API Service in the release namespace', async () => {
    const objects = await render({
      values: ['values-prod.yaml'],
      namespace: 'social-posts-prod',
      set: {
        'metrics.serviceMonitor.enabled': 'true',
        'metrics.serviceMonitor.interval': '15s',
        'metrics.serviceMonitor.labels.release': 'kube-prometheus-stack',
      },
    });
    const monitors = findAll(objects, 'ServiceMonitor');
    expect(monitors).toHaveLength(1);
    const [monitor] = monitors;
    expect(monitor?.apiVersion).toBe('monitoring.coreos.com/v1');
    expect(monitor?.metadata.name).toBe('social-posts');
    expect(monitor?.metadata.labels).toMatchObject({ release: 'kube-prometheus-stack', ...apiSelector });
    expect(monitor?.spec).toEqual({
      selector: { matchLabels: apiSelector },
      namespaceSelector: { matchNames: ['social-posts-prod'] },
      endpoints: [{ port: 'metrics', path: '/metrics', interval: '15s', scrapeTimeout: '10s' }],
    });
    // It selects the API Service (which carries those labels and the metrics port), never PostgreSQL's.
    const service = findOne(objects, 'Service', 'social-posts');
    expect(service.metadata?.labels).toMatchObject(apiSelector);
  });
});

describe('Scrape annotations', () => {
  it('When metrics.scrapeAnnotations is on, then the API pods carry prometheus.io scrape, port and path', async () => {
    const objects = await render(valuesOf('dev', { 'metrics.scrapeAnnotations': 'true' }));
    expect(podAnnotations(objects)).toMatchObject({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': '9464',
      'prometheus.io/path': '/metrics',
    });
  });

  it('When metrics.port is changed, then the ConfigMap, container, Service and annotations follow it', async () => {
    const objects = await render(
      valuesOf('dev', { 'metrics.port': '9100', 'metrics.scrapeAnnotations': 'true' }),
    );
    expect(configMapData(objects).METRICS_PORT).toBe('9100');
    expect(apiContainer(objects).ports).toContainEqual({
      name: 'metrics',
      containerPort: 9100,
      protocol: 'TCP',
    });
    expect(findOne(objects, 'Service', 'social-posts').spec?.ports).toContainEqual({
      name: 'metrics',
      port: 9100,
      targetPort: 'metrics',
      protocol: 'TCP',
    });
    expect(podAnnotations(objects)['prometheus.io/port']).toBe('9100');
  });
});

describe('NetworkPolicy and metrics', () => {
  const metricsRule = async (set: Record<string, string>) => {
    const rules =
      findOne(await render(valuesOf('prod', set)), 'NetworkPolicy', 'social-posts').spec?.ingress ?? [];
    return rules.filter((rule) => rule.ports?.some((port) => port.port === 'metrics'));
  };

  it('When Prometheus pod labels are given, then only those pods of the monitoring namespace may scrape, and only the metrics port', async () => {
    const rules = await metricsRule({
      'networkPolicy.metricsPodLabels.app\\.kubernetes\\.io/name': 'prometheus',
    });
    expect(rules).toEqual([
      {
        from: [
          {
            // One peer with both selectors: the pods must match both (AND), not either.
            ...namespaced('monitoring'),
            podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } },
          },
        ],
        ports: [{ port: 'metrics', protocol: 'TCP' }],
      },
    ]);
  });

  it('When metricsNamespace names another namespace, then the rule follows it', async () => {
    const rules = await metricsRule({ 'networkPolicy.metricsNamespace': 'observability' });
    expect(rules[0]?.from).toEqual([namespaced('observability')]);
  });

  it('When metricsNamespace is empty, then no rule admits scrapes and the ingress controller still reaches only http', async () => {
    const objects = await render(valuesOf('prod', { 'networkPolicy.metricsNamespace': '' }));
    const rules = findOne(objects, 'NetworkPolicy', 'social-posts').spec?.ingress ?? [];
    expect(rules).toHaveLength(1);
    expect(rules[0]?.ports).toEqual([{ port: 'http', protocol: 'TCP' }]);
  });
});
