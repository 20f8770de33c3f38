import { loadSettings } from '../../service/src/settings';
import {
  apiContainer,
  configMapData,
  findAll,
  findOne,
  render,
  renderedBeforeAll,
  renderRefused,
} from './helm';
import { schemaProblems } from './kubernetes-schemas';

const traced = {
  'tracing.enabled': 'true',
  'tracing.endpoint': 'http://otel-collector.observability:4318',
  'tracing.collector.namespace': 'observability',
  'networkPolicy.enabled': 'true',
};

/** The dev environment's values (a key, the in-chart database) with the policy on. */
const base = { values: ['values-dev.yaml'], set: { 'networkPolicy.enabled': 'true' } };

describe('Tracing in the chart', () => {
  const off = renderedBeforeAll(() => render(base));
  const on = renderedBeforeAll(() =>
    render({
      ...base,
      set: traced,
      setJson: {
        // --set leaves a fraction a string; the schema wants a number.
        'tracing.samplingRatio': 0.25,
        'tracing.resourceAttributes': { 'deployment.environment.name': 'prod eu,1' },
        'tracing.collector.podLabels': { 'app.kubernetes.io/name': 'otel-collector' },
      },
    }),
  );

  it('When tracing is off (the default), then no OTEL_* setting, no pod-name variable and no proxy span annotation are rendered', () => {
    expect(Object.keys(configMapData(off)).filter((key) => key.startsWith('OTEL_'))).toEqual([]);
    expect((apiContainer(off).env ?? []).map((e) => e.name)).not.toContain('OTEL_RESOURCE_ATTRIBUTES');
    for (const ingress of findAll(off, 'Ingress'))
      expect(Object.keys(ingress.metadata?.annotations ?? {})).not.toContain(
        'nginx.ingress.kubernetes.io/enable-opentelemetry',
      );
  });

  it('When tracing is on, then the ConfigMap sets the endpoint, protocol, service name and a parent-based ratio sampler, which the service accepts', () => {
    const data = configMapData(on);
    expect(Object.fromEntries(Object.entries(data).filter(([key]) => key.startsWith('OTEL_')))).toEqual({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector.observability:4318',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_SERVICE_NAME: 'social-posts',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
    });
    const env = apiContainer(on).env ?? [];
    const attributes = env.find((e) => e.name === 'OTEL_RESOURCE_ATTRIBUTES')?.value ?? '';
    const settings = loadSettings({
      ...data,
      SECRET_KEY: 'a-secret-long-enough-for-the-settings-0123456789',
      // What Kubernetes makes of $(K8S_POD_NAME) in the pod.
      OTEL_RESOURCE_ATTRIBUTES: attributes.replace('$(K8S_POD_NAME)', 'social-posts-5d9c7-abcde'),
    });
    expect(settings.tracing).toMatchObject({
      endpoint: 'http://otel-collector.observability:4318',
      sampler: 'parentbased_traceidratio',
      samplerArg: 0.25,
    });
    expect(settings.tracing.resourceAttributes).toEqual({
      'service.version': expect.stringMatching(/^\d+\.\d+\.\d+/) as unknown,
      'k8s.namespace.name': 'social-posts-test',
      'k8s.deployment.name': 'social-posts',
      'k8s.pod.name': 'social-posts-5d9c7-abcde',
      'deployment.environment.name': 'prod eu,1',
    });
  });

  it("When the image's tag is set (a hotfix build, skaffold's), then service.version is that tag, the build the pods run", async () => {
    const tagged = await render({ ...base, set: { ...traced, 'image.tag': '2.1.1-hotfix.1' } });
    const attributes = (apiContainer(tagged).env ?? []).find(
      (e) => e.name === 'OTEL_RESOURCE_ATTRIBUTES',
    )?.value;
    expect(attributes?.split(',')).toContain('service.version=2.1.1-hotfix.1');
  });

  it("When tracing is on, then the pod's name comes from the downward API before the variable that expands it", () => {
    const names = (apiContainer(on).env ?? []).map((e) => e.name);
    expect(names.indexOf('K8S_POD_NAME')).toBeGreaterThanOrEqual(0);
    expect(names.indexOf('K8S_POD_NAME')).toBeLessThan(names.indexOf('OTEL_RESOURCE_ATTRIBUTES'));
    const pod = (apiContainer(on).env ?? []).find((e) => e.name === 'K8S_POD_NAME');
    expect(pod?.valueFrom?.fieldRef?.fieldPath).toBe('metadata.name');
  });

  it("When tracing is on, then the NetworkPolicy lets the pods reach the collector's OTLP/HTTP port in its namespace, and nothing more", () => {
    const policy = findOne(on, 'NetworkPolicy', 'social-posts');
    const toCollector = (policy.spec?.egress ?? []).filter((rule) =>
      (rule.to ?? []).some(
        (peer) => peer.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'] === 'observability',
      ),
    );
    expect(toCollector).toEqual([
      {
        to: [
          {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'observability' } },
            podSelector: { matchLabels: { 'app.kubernetes.io/name': 'otel-collector' } },
          },
        ],
        ports: [{ port: 4318, protocol: 'TCP' }],
      },
    ]);
    const offPolicy = findOne(off, 'NetworkPolicy', 'social-posts');
    expect((policy.spec?.egress ?? []).length).toBe((offPolicy.spec?.egress ?? []).length + 1);
  });

  it('When tracing is on with the Ingress path, then both Ingresses ask ingress-nginx for a span that continues an incoming traceparent', () => {
    const ingresses = findAll(on, 'Ingress');
    expect(ingresses.length).toBe(2);
    for (const ingress of ingresses)
      expect(ingress.metadata?.annotations).toMatchObject({
        'nginx.ingress.kubernetes.io/enable-opentelemetry': 'true',
        'nginx.ingress.kubernetes.io/opentelemetry-trust-incoming-span': 'true',
      });
  });

  it("When the Ingresses are not to trust a caller's span, then both ask ingress-nginx for a trace of its own", async () => {
    const untrusting = await render({
      ...base,
      set: { ...traced, 'tracing.ingress.trustIncomingSpan': 'false' },
    });
    for (const ingress of findAll(untrusting, 'Ingress'))
      expect(ingress.metadata?.annotations).toMatchObject({
        'nginx.ingress.kubernetes.io/enable-opentelemetry': 'true',
        'nginx.ingress.kubernetes.io/opentelemetry-trust-incoming-span': 'false',
      });
  });

  it('When tracing is on with the Ingress path, then no ObservabilityPolicy is rendered', () => {
    expect(findAll(on, 'ObservabilityPolicy')).toEqual([]);
  });

  // Without an endpoint, rendering fails: lint.test.ts's guards.
  it('When the sampling ratio is outside 0 to 1, then the values schema refuses it', async () => {
    expect(
      await renderRefused({ ...base, set: traced, setJson: { 'tracing.samplingRatio': 1.5 } }),
    ).toContain('samplingRatio');
  });
});

describe('Tracing on the Gateway API path', () => {
  const gateway = { ...traced, 'gateway.enabled': 'true', 'gateway.parentRef.name': 'shared' };
  const ngf = renderedBeforeAll(() =>
    render({ ...base, set: gateway, setJson: { 'tracing.samplingRatio': 0.25 } }),
  );
  const route = (name: string) => ({ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name });

  it("When tracing is on with NGINX Gateway Fabric, then one ObservabilityPolicy samples both HTTPRoutes at the service's ratio and hands the trace context on, valid against NGF's CRD", () => {
    expect(findAll(ngf, 'ObservabilityPolicy').map((p) => [p.apiVersion, p.metadata.name, p.spec])).toEqual([
      [
        'gateway.nginx.org/v1alpha2',
        'social-posts',
        {
          targetRefs: [route('social-posts-auth'), route('social-posts')],
          tracing: { strategy: 'ratio', ratio: 25, context: 'propagate' },
        },
      ],
    ]);
    expect(configMapData(ngf).OTEL_TRACES_SAMPLER_ARG).toBe('0.25');
    expect(schemaProblems(ngf)).toEqual([]);
  });

  it('When the implementation is Envoy Gateway or none, tracing.gateway.enabled is false or tracing is off, then no ObservabilityPolicy is rendered', async () => {
    const renders = await Promise.all(
      [
        { 'gateway.rateLimit.implementation': 'envoy-gateway' } as Record<string, string>,
        { 'gateway.rateLimit.implementation': 'none' },
        { 'tracing.gateway.enabled': 'false' },
        { 'tracing.enabled': 'false' },
      ].map((set) => render({ ...base, set: { ...gateway, ...set } })),
    );
    expect(renders.map((objects) => findAll(objects, 'ObservabilityPolicy').length)).toEqual([0, 0, 0, 0]);
    // The same renders still carry the routes: only the policy is left out.
    expect(renders.map((objects) => findAll(objects, 'HTTPRoute').length)).toEqual([2, 2, 2, 2]);
  });
});
