import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import { renderBeside } from './fake-kube-api';
import { secretObject } from '../../tools/harness/manifests';
import {
  apiContainer,
  environmentOptions,
  environments,
  findAll,
  findOne,
  kubeDns,
  must,
  namespaced,
  podAnnotations,
  refusedEach,
  render,
  renderEnvironment,
  renderRefused,
  template,
  valuesOf,
  type KubeObject,
} from './helm';
import { schemaProblems, unknownFieldProblems } from './kubernetes-schemas';
import { treeVersions } from '../../tools/harness/releases';

/** Prod's values with `setJson` on top. */
const prodSetJson = (setJson: Record<string, unknown>) => ({ values: ['values-prod.yaml'], setJson });

/** Every pod spec the chart makes: the Deployment's, the dev StatefulSet's and the helm test Pod's. */
function podSpecs(objects: KubeObject[]): [string, IPodSpec][] {
  const specs = [
    ...findAll(objects, 'Deployment').map((d) => ({ ...d, spec: d.spec?.template.spec })),
    ...findAll(objects, 'StatefulSet').map((s) => ({ ...s, spec: s.spec?.template.spec })),
    ...findAll(objects, 'Pod'),
  ];
  return specs.map((o) => [`${o.kind} ${o.metadata?.name ?? ''}`, must(o.spec, 'pod spec')]);
}

describe('Renders that GitOps can keep', () => {
  it.each(environments.filter((environment) => environment !== 'dev'))(
    'When the %s values are rendered twice without a cluster (as Argo CD does), then both renders are byte for byte the same',
    async (environment) => {
      const first = await template(environmentOptions(environment));
      const second = await template(environmentOptions(environment));
      expect(first.code).toBe(0);
      expect(second.stdout).toBe(first.stdout);
    },
  );

  it('When no key is given, none is kept and generation is off, then rendering fails with one line saying why instead of making a key that changes every render', async () => {
    const stderr = await renderRefused(valuesOf('dev', { 'secret.generate': 'false' }));
    expect(stderr).toContain(
      'secret.secretKey is empty and the release has no Secret to keep one from: set secret.secretKey or secret.existingSecret, or secret.generate=true with helm install/upgrade',
    );
    expect(stderr.trim().split('\n')).toHaveLength(3); // "Error: …", a blank line, helm's --debug hint
  });
});

describe('Pods restart when your existing Secret changes (helm upgrade reads it)', () => {
  const namespace = 'social-posts-staging';
  const yourSecret = (key: string) =>
    secretObject({ name: 'social-posts-staging-secrets', namespace }, 'Opaque', {
      SECRET_KEY: key,
      DB_PASSWORD: 'pw',
    });
  async function secretChecksum(secret: KubeObject): Promise<string | undefined> {
    return podAnnotations(await renderBeside([secret], environmentOptions('staging')))['checksum/secret'];
  }

  it('When the Secret is unchanged, then the checksum is too; when its key changes, then the checksum changes and so the pods roll', async () => {
    const first = await secretChecksum(yourSecret('the-first-signing-key-0123456789abcdef'));
    const same = await secretChecksum(yourSecret('the-first-signing-key-0123456789abcdef'));
    const rotated = await secretChecksum(yourSecret('the-second-signing-key-0123456789abcdef'));
    expect(first).toMatch(/^[a-f0-9]{64}$/);
    expect(same).toBe(first);
    expect(rotated).not.toBe(first);
  });

  it('When rendered without a cluster, then no checksum of your Secret is written (nothing to read; the render stays stable)', async () => {
    expect(podAnnotations(await renderEnvironment('staging'))['checksum/secret']).toBeUndefined();
  });

  it('When deploymentAnnotations names Reloader, then the Deployment carries it (GitOps: Reloader rolls the pods on a Secret change)', async () => {
    const objects = await render({
      values: ['values-staging.yaml'],
      setString: {
        'deploymentAnnotations.secret\\.reloader\\.stakater\\.com/reload': 'social-posts-staging-secrets',
      },
    });
    expect(findOne(objects, 'Deployment').metadata?.annotations).toEqual({
      'secret.reloader.stakater.com/reload': 'social-posts-staging-secrets',
    });
  });
});

describe('NetworkPolicy: DNS and extra rules', () => {
  it('When the prod values are rendered, then DNS goes to kube-dns by its label in any namespace, on 53 UDP and TCP', async () => {
    const egress = must(
      findOne(await renderEnvironment('prod'), 'NetworkPolicy', 'social-posts').spec?.egress,
      'egress',
    );
    expect(egress[0]).toEqual(kubeDns);
  });

  it('When networkPolicy.dns.to names NodeLocal DNSCache and CoreDNS by another label, then exactly those resolvers are allowed', async () => {
    const resolvers = [
      { ipBlock: { cidr: '169.254.20.10/32' } },
      { ...namespaced('kube-system'), podSelector: { matchLabels: { 'app.kubernetes.io/name': 'coredns' } } },
    ];
    const objects = await render(prodSetJson({ 'networkPolicy.dns.to': resolvers }));
    expect(findOne(objects, 'NetworkPolicy', 'social-posts').spec?.egress?.[0]?.to).toEqual(resolvers);
    expect(schemaProblems(objects.filter((o) => o.kind === 'NetworkPolicy'))).toEqual([]);
  });

  it('When extra ingress and egress rules are given, then they follow the chart rules and nothing else opens', async () => {
    const collector = { to: [namespaced('otel')], ports: [{ port: 4318, protocol: 'TCP' }] };
    const mesh = { from: [namespaced('mesh')], ports: [{ port: 'http', protocol: 'TCP' }] };
    const objects = await render(
      prodSetJson({ 'networkPolicy.extraEgress': [collector], 'networkPolicy.extraIngress': [mesh] }),
    );
    const policy = findOne(objects, 'NetworkPolicy', 'social-posts');
    expect(policy.spec?.egress).toHaveLength(3);
    expect(policy.spec?.egress?.[2]).toEqual(collector);
    expect(policy.spec?.ingress).toHaveLength(3);
    expect(policy.spec?.ingress?.[2]).toEqual(mesh);
    expect(schemaProblems(objects.filter((o) => o.kind === 'NetworkPolicy'))).toEqual([]);
  });

  refusedEach<Record<string, unknown>>([
    [
      'a DNS peer with an unknown field',
      { 'networkPolicy.dns.to': [{ podSelectr: {} }] },
      '/networkPolicy/dns/to/0',
    ],
    ['no DNS peer at all', { 'networkPolicy.dns.to': [] }, '/networkPolicy/dns/to'],
    [
      'an egress rule with a bad CIDR',
      { 'networkPolicy.extraEgress': [{ to: [{ ipBlock: { cidr: '10.0.0.0' } }] }] },
      '/networkPolicy/extraEgress/0',
    ],
  ])('When the values carry %s, then rendering fails naming the value', prodSetJson);
});

describe('HorizontalPodAutoscaler behavior and memory', () => {
  it('When the prod values are rendered, then the autoscaler scales out fast and in one pod a minute after five calm minutes', async () => {
    const hpa = findOne(await renderEnvironment('prod'), 'HorizontalPodAutoscaler');
    expect(hpa.spec?.behavior?.scaleDown).toEqual({
      stabilizationWindowSeconds: 300,
      selectPolicy: 'Min',
      policies: [{ type: 'Pods', value: 1, periodSeconds: 60 }],
    });
    expect(hpa.spec?.behavior?.scaleUp?.policies).toContainEqual({
      type: 'Percent',
      value: 100,
      periodSeconds: 30,
    });
    expect(hpa.spec?.metrics?.map((metric) => metric.resource?.name)).toEqual(['cpu']);
  });

  it('When a memory target is set, then the autoscaler watches memory as well as CPU', async () => {
    const objects = await render(valuesOf('prod', { 'autoscaling.targetMemoryUtilizationPercentage': '80' }));
    const hpa = findOne(objects, 'HorizontalPodAutoscaler');
    expect(hpa.spec?.metrics?.[1]).toEqual({
      type: 'Resource',
      resource: { name: 'memory', target: { type: 'Utilization', averageUtilization: 80 } },
    });
    expect(schemaProblems(objects.filter((o) => o.kind === 'HorizontalPodAutoscaler'))).toEqual([]);
  });

  it('When behavior is null, then Kubernetes keeps its own defaults (no behavior field)', async () => {
    const objects = await render(valuesOf('prod', { 'autoscaling.behavior': 'null' }));
    expect(findOne(objects, 'HorizontalPodAutoscaler').spec?.behavior).toBeUndefined();
  });
});

describe('Extension points', () => {
  const extended = prodSetJson({
    extraEnvVars: [
      { name: 'NODE_EXTRA_CA_CERTS', value: '/etc/extra-ca/ca.crt' },
      {
        name: 'OTEL_SERVICE_NAME',
        valueFrom: { fieldRef: { fieldPath: "metadata.labels['app.kubernetes.io/name']" } },
      },
    ],
    extraVolumes: [{ name: 'extra-ca', configMap: { name: 'corporate-ca' } }],
    extraVolumeMounts: [{ name: 'extra-ca', mountPath: '/etc/extra-ca', readOnly: true }],
    sidecars: [
      { name: 'log-shipper', image: 'fluent/fluent-bit:4.0.3', resources: { limits: { memory: '64Mi' } } },
    ],
    podAnnotations: { 'example.com/team': 'posts' },
    podLabels: { 'example.com/tier': 'api' },
  });

  it('When extra env vars, volumes, mounts, a sidecar and pod annotations and labels are given, then the API pods carry them beside the chart’s own, valid against the Kubernetes schemas', async () => {
    const objects = await render(extended);
    const deployment = findOne(objects, 'Deployment');
    const pod = must(deployment.spec?.template, 'pod template');
    const container = apiContainer(objects);
    expect(container.env?.map((variable) => variable.name)).toEqual([
      'SECRET_KEY',
      'SECRET_KEYS_ACCEPTED',
      'DB_PASSWORD',
      'NODE_EXTRA_CA_CERTS',
      'OTEL_SERVICE_NAME',
    ]);
    expect(container.volumeMounts).toContainEqual({
      name: 'extra-ca',
      mountPath: '/etc/extra-ca',
      readOnly: true,
    });
    expect(container.volumeMounts).toContainEqual(expect.objectContaining({ name: 'tmp' }));
    expect(pod.spec?.volumes).toContainEqual({ name: 'extra-ca', configMap: { name: 'corporate-ca' } });
    expect(pod.spec?.containers.map((c) => c.name)).toEqual(['social-posts', 'log-shipper']);
    expect(pod.metadata?.annotations?.['example.com/team']).toBe('posts');
    expect(pod.metadata?.labels?.['example.com/tier']).toBe('api');
    // The selector stays the chart's: extra labels never change which pods the Deployment owns.
    expect(deployment.spec?.selector.matchLabels).not.toHaveProperty('example.com/tier');
    const raw = objects.filter((o) => o.kind === 'Deployment');
    expect(schemaProblems(raw)).toEqual([]);
    expect(unknownFieldProblems(raw)).toEqual([]);
  });

  refusedEach<Record<string, unknown>>([
    ...['DB_HOSTNAME', 'SECRET_KEY', 'DB_POOL_MAX'].map((name): [string, Record<string, unknown>, string] => [
      `extraEnvVars naming ${name}, which the chart sets`,
      { extraEnvVars: [{ name, value: 'x' }] },
      `extraEnvVars: ${name} is set by the chart; use its value in values.yaml instead`,
    ]),
    ...['OTEL_RESOURCE_ATTRIBUTES', 'K8S_POD_NAME'].map((name): [string, Record<string, unknown>, string] => [
      `extraEnvVars naming ${name}, which the chart sets while tracing is on`,
      { extraEnvVars: [{ name, value: 'x' }], tracing: { enabled: true, endpoint: 'http://collector:4318' } },
      `extraEnvVars: ${name} is set by the chart; use its value in values.yaml instead`,
    ]),
    [
      'an env var with both value and valueFrom',
      { extraEnvVars: [{ name: 'A', value: 'x', valueFrom: { fieldRef: {} } }] },
      '/extraEnvVars/0',
    ],
    ['a mount without a path', { extraVolumeMounts: [{ name: 'v' }] }, '/extraVolumeMounts/0'],
    [
      'a volume named like the chart’s tmp',
      { extraVolumes: [{ name: 'tmp', emptyDir: {} }] },
      '/extraVolumes/0',
    ],
    ['a sidecar without an image', { sidecars: [{ name: 'x' }] }, '/sidecars/0'],
  ])('When the values carry %s, then rendering fails naming the value', prodSetJson);
});

describe('Images: digests, a global registry and pull secrets on every pod', () => {
  const digest = `sha256:${'a'.repeat(64)}`;

  it('When global.imageRegistry is set, then every image the chart runs comes from it (Docker Hub images under library/), digests kept', async () => {
    const objects = await render(
      valuesOf('dev', {
        'global.imageRegistry': 'mirror.example.internal:5000/proxy',
        'image.digest': digest,
        'postgresql.image.digest': digest,
      }),
    );
    expect(podSpecs(objects).map(([, spec]) => spec.containers[0]?.image)).toEqual([
      `mirror.example.internal:5000/proxy/social-posts/social-posts:${treeVersions().app}@${digest}`,
      `mirror.example.internal:5000/proxy/library/postgres:18.3-trixie@${digest}`,
      'mirror.example.internal:5000/proxy/library/busybox:1.37.0',
    ]);
  });

  it('When no registry is set, then images are as given, pinned by digest where one is given', async () => {
    const objects = await render(valuesOf('dev', { 'tests.image.digest': digest }));
    expect(podSpecs(objects).map(([, spec]) => spec.containers[0]?.image)).toEqual([
      `ghcr.io/social-posts/social-posts:${treeVersions().app}`,
      'postgres:18.3-trixie',
      `busybox:1.37.0@${digest}`,
    ]);
  });

  it('When pull secrets are given (the chart’s and a parent’s global ones), then every pod the chart makes carries each once', async () => {
    const objects = await render({
      values: ['values-dev.yaml'],
      setJson: {
        imagePullSecrets: [{ name: 'regcred' }],
        'global.imagePullSecrets': [{ name: 'shared' }, { name: 'regcred' }],
      },
    });
    const specs = podSpecs(objects);
    expect(specs.map(([what]) => what)).toEqual([
      'Deployment social-posts',
      'StatefulSet social-posts-postgresql',
      'Pod social-posts-test-ready',
    ]);
    for (const [, spec] of specs)
      expect(spec.imagePullSecrets).toEqual([{ name: 'regcred' }, { name: 'shared' }]);
  });

  it('When no pull secrets are given, then no pod carries an empty imagePullSecrets', async () => {
    for (const [, spec] of podSpecs(await renderEnvironment('dev')))
      expect(spec.imagePullSecrets).toBeUndefined();
  });
});

describe('Dev PostgreSQL: a headless governing Service', () => {
  it('When the dev values are rendered, then the StatefulSet is governed by a headless Service and the API still dials the ClusterIP one', async () => {
    const objects = await renderEnvironment('dev');
    const headless = findOne(objects, 'Service', 'social-posts-postgresql-hl');
    expect(headless.spec).toMatchObject({ clusterIP: 'None', publishNotReadyAddresses: true });
    expect(headless.spec?.selector).toEqual(
      findOne(objects, 'Service', 'social-posts-postgresql').spec?.selector,
    );
    expect(findOne(objects, 'StatefulSet').spec?.serviceName).toBe('social-posts-postgresql-hl');
    expect(findOne(objects, 'Service', 'social-posts-postgresql').spec?.clusterIP).toBeUndefined();
  });
});
