import {
  ciValuesFiles,
  environmentOptions,
  environments,
  lint,
  refusedEach,
  renderRefused,
  template,
  valuesOf,
  type RenderOptions,
} from './helm';

describe('helm lint --strict', () => {
  it.each(environments)(
    'When the %s values are linted, then helm reports no warning or error',
    async (environment) => {
      const result = await lint(environmentOptions(environment));
      expect(result.stdout + result.stderr).toContain('0 chart(s) failed');
      expect(result.code).toBe(0);
    },
  );

  it('When chart-testing looks for ci/*-values.yaml, then it finds some', () => {
    expect(ciValuesFiles.length).toBeGreaterThan(0);
  });

  it.each(ciValuesFiles)('When %s is linted and rendered, then both succeed', async (file) => {
    expect((await lint({ values: [file] })).code).toBe(0);
    const rendered = await template({ values: [file] });
    expect(rendered.stderr).toBe('');
    expect(rendered.code).toBe(0);
  });
});

describe('values.schema.json', () => {
  it.each([
    ['an unknown top-level key', { replicas: '2' }, "additional properties 'replicas' not allowed"],
    ['a wrong type', { replicaCount: 'three' }, '/replicaCount'],
  ])('When the values carry %s, then helm lint and helm template both fail', async (_case, set, message) => {
    const linted = await lint({ values: ['values-dev.yaml'], set });
    expect(linted.code).not.toBe(0);
    expect(linted.stdout + linted.stderr).toContain(message);
    expect(await renderRefused({ values: ['values-dev.yaml'], set })).toContain(message);
  });

  refusedEach<Record<string, string>>([
    ['a wildcard CORS origin', { 'config.corsAllowedOrigins': '{*}' }, '/config/corsAllowedOrigins/0'],
    [
      'a CORS origin with a path',
      { 'config.corsAllowedOrigins': '{https://app.example.com/}' },
      '/config/corsAllowedOrigins/0',
    ],
    ['bcrypt rounds below 10', { 'config.bcryptRounds': '8' }, '/config/bcryptRounds'],
    [
      "a statement time-out below the service's least, 200",
      { 'database.statementTimeoutMs': '199' },
      "at '/database/statementTimeoutMs': minimum: got 199, want 200",
    ],
    [
      "a statement time-out above the service's most",
      { 'database.statementTimeoutMs': '600001' },
      "at '/database/statementTimeoutMs': maximum: got 600,001, want 600,000",
    ],
    // The service refuses these at start: new pods would crash-loop and the rollout stall.
    [
      "a shutdown delay above the service's most",
      { 'config.shutdownDelaySeconds': '121', terminationGracePeriodSeconds: '300' },
      "at '/config/shutdownDelaySeconds': maximum: got 121, want 120",
    ],
    [
      "a drain above the service's most",
      { 'config.shutdownTimeoutSeconds': '601', terminationGracePeriodSeconds: '700' },
      "at '/config/shutdownTimeoutSeconds': maximum: got 601, want 600",
    ],
    [
      "a pool above the service's most",
      { 'database.poolMax': '101' },
      "at '/database/poolMax': maximum: got 101, want 100",
    ],
    ['a SECRET_KEY shorter than 32 characters', { 'secret.secretKey': 'short' }, '/secret/secretKey'],
    ['an unknown key inside ingress', { 'ingress.hosts': 'x' }, "additional properties 'hosts' not allowed"],
    ['a probe with an action of its own', { 'readinessProbe.httpGet.path': '/' }, '/readinessProbe'],
    ['no memory limit', { 'resources.limits': 'null' }, '/resources'],
    ['an image digest that is not sha256', { 'image.digest': 'latest' }, '/image/digest'],
    [
      'a condition nginx does not know in ingress.proxyNextUpstream',
      { 'ingress.proxyNextUpstream': 'error retry' },
      '/ingress/proxyNextUpstream',
    ],
    // nginx would send a POST again after the first replica may have written it: a second post.
    [
      'non_idempotent in ingress.proxyNextUpstream',
      { 'ingress.proxyNextUpstream': 'error non_idempotent' },
      '/ingress/proxyNextUpstream',
    ],
    [
      'zero ingress.proxyNextUpstreamTries',
      { 'ingress.proxyNextUpstreamTries': '0' },
      '/ingress/proxyNextUpstreamTries',
    ],
    [
      'a ServiceMonitor interval that is not a Prometheus duration',
      { 'metrics.serviceMonitor.enabled': 'true', 'metrics.serviceMonitor.interval': 'often' },
      '/metrics/serviceMonitor/interval',
    ],
    // Metrics must never share the API port.
    [
      'a metrics.port equal to containerPort',
      { 'metrics.port': '8000' },
      'metrics.port must differ from containerPort',
    ],
    ['no Gateway name', { 'gateway.enabled': 'true' }, '/gateway/parentRef/name'],
    [
      'an unknown Gateway implementation',
      {
        'gateway.enabled': 'true',
        'gateway.parentRef.name': 'gw',
        'gateway.rateLimit.implementation': 'traefik',
      },
      '/gateway/rateLimit/implementation',
    ],
    [
      'an unknown key inside gateway',
      { 'gateway.hostnames': 'x' },
      "additional properties 'hostnames' not allowed",
    ],
    [
      'a zero Gateway read time-out',
      { 'gateway.timeouts.readSeconds': '0' },
      '/gateway/timeouts/readSeconds',
    ],
  ])('When the values carry %s, then helm template fails naming the value', (set) => valuesOf('dev', set));

  it.each([
    'nginx.ingress.kubernetes.io/server-snippet',
    'nginx.ingress.kubernetes.io/configuration-snippet',
    'nginx.ingress.kubernetes.io/use-regex',
    'nginx.ingress.kubernetes.io/rewrite-target',
    'nginx.ingress.kubernetes.io/limit-rpm',
    'nginx.ingress.kubernetes.io/proxy-read-timeout',
    'nginx.ingress.kubernetes.io/proxy-next-upstream',
    'nginx.ingress.kubernetes.io/proxy-next-upstream-tries',
  ])('When ingress.annotations carries %s, then helm template refuses it', async (annotation) => {
    const key = `ingress.annotations.${annotation.replaceAll('.', '\\.')}`;
    expect(await renderRefused({ values: ['values-dev.yaml'], setString: { [key]: 'x' } })).toContain(
      `invalid propertyName '${annotation}'`,
    );
  });

  it('When ingress.annotations carries an unrelated annotation, then it is accepted', async () => {
    const key = 'ingress.annotations.cert-manager\\.io/cluster-issuer';
    const rendered = await template({ values: ['values-dev.yaml'], setString: { [key]: 'letsencrypt' } });
    expect(rendered.stderr).toBe('');
    expect(rendered.code).toBe(0);
  });
});

describe('Guards across values', () => {
  refusedEach<RenderOptions>([
    [
      'terminationGracePeriodSeconds does not exceed the shutdown delay plus drain time',
      { values: ['values-dev.yaml'], set: { terminationGracePeriodSeconds: '20' } },
      'terminationGracePeriodSeconds (20) must exceed',
    ],
    [
      'the in-chart PostgreSQL is off and no database host is given (instead of using the embedded database)',
      { set: { 'secret.dbPassword': 'x', 'secret.generate': 'true' } },
      'database.host is required',
    ],
    [
      'an external database is first installed without a password or existing Secret',
      { set: { 'database.host': 'db.example.internal', 'secret.generate': 'true' } },
      'secret.dbPassword is required',
    ],
    [
      'the in-chart PostgreSQL has no password given or kept and generation is off',
      {
        values: ['values-dev.yaml'],
        set: { 'secret.generate': 'false', 'secret.secretKey': 'an-operator-chosen-signing-key-0123456789' },
      },
      'secret.dbPassword is empty and the release has no Secret to keep one from',
    ],
    [
      'autoscaling.maxReplicas is below minReplicas',
      { values: ['values-prod.yaml'], set: { 'autoscaling.maxReplicas': '2' } },
      'autoscaling.maxReplicas must be at least autoscaling.minReplicas',
    ],
    [
      'an external database has no CIDR (instead of allowing any address on its port)',
      { values: ['values-staging.yaml'], set: { 'networkPolicy.databaseCidr': '' } },
      'networkPolicy.databaseCidr is required for an external database when networkPolicy.enabled',
    ],
    [
      'tracing is on without an endpoint',
      { values: ['values-dev.yaml'], set: { 'tracing.enabled': 'true' } },
      'tracing.endpoint is required with tracing.enabled',
    ],
    [
      "NGINX Gateway Fabric's tracing ratio would not be the service's (not a whole percent)",
      {
        values: ['values-dev.yaml'],
        set: {
          'tracing.enabled': 'true',
          'tracing.endpoint': 'http://otel-collector.observability:4318',
          'gateway.enabled': 'true',
          'gateway.parentRef.name': 'shared',
        },
        setJson: { 'tracing.samplingRatio': 0.005 },
      },
      'tracing.samplingRatio 0.005 is not a whole percent',
    ],
  ])('When %s, then rendering fails saying why', (options) => options);
});
