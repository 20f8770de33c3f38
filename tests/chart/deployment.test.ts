import {
  apiContainer,
  configMapData,
  environments,
  findOne,
  must,
  podAnnotations,
  podSpec,
  render,
  renderedBeforeAll,
  renderEnvironment,
  valuesOf,
} from './helm';
import { treeVersions } from '../../tools/harness/releases';

describe.each(environments)('The API Deployment of %s', (environment) => {
  const objects = renderedBeforeAll(() => renderEnvironment(environment));

  it(`When the ${environment} values are rendered, then the container exposes port 8000 named http (and 9464 named metrics) and the Service targets them by name`, () => {
    expect(apiContainer(objects).ports).toEqual([
      { name: 'http', containerPort: 8000, protocol: 'TCP' },
      { name: 'metrics', containerPort: 9464, protocol: 'TCP' },
    ]);
    const service = findOne(objects, 'Service', 'social-posts');
    expect(service.spec?.ports).toEqual([
      { name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' },
      { name: 'metrics', port: 9464, targetPort: 'metrics', protocol: 'TCP' },
    ]);
    expect(service.spec?.selector).toEqual(findOne(objects, 'Deployment').spec?.selector.matchLabels);
  });

  it(`When the ${environment} values are rendered, then liveness checks /healthz/live and readiness /healthz/ready on the named port`, () => {
    const container = apiContainer(objects);
    expect(container.livenessProbe?.httpGet).toEqual({ path: '/healthz/live', port: 'http' });
    expect(container.readinessProbe?.httpGet).toEqual({ path: '/healthz/ready', port: 'http' });
    // Readiness answers within 1 s (SELECT 1 budget); the probe must wait at least that long.
    expect(container.readinessProbe?.timeoutSeconds).toBeGreaterThan(1);
  });

  it(`When the ${environment} values are rendered, then the startup probe's window covers the pod's database wait plus its migration budget`, () => {
    const startup = must(apiContainer(objects).startupProbe, 'startupProbe');
    expect(startup.httpGet).toEqual({ path: '/healthz/live', port: 'http' });
    const config = configMapData(objects);
    const worstStart =
      Number(config['DB_STARTUP_WAIT_SECONDS']) + Number(config['DB_MIGRATION_TIMEOUT_MS']) / 1000;
    expect(worstStart).toBeGreaterThan(0);
    const window =
      (startup.initialDelaySeconds ?? 0) + (startup.periodSeconds ?? 10) * (startup.failureThreshold ?? 3);
    expect(window).toBeGreaterThanOrEqual(worstStart);
  });

  it(`When the ${environment} values are rendered, then the grace period is comfortably above the 5 s delay plus 15 s drain`, () => {
    expect(podSpec(objects).terminationGracePeriodSeconds).toBeGreaterThanOrEqual(30);
  });

  it(`When the ${environment} values are rendered, then the pod runs non-root with RuntimeDefault seccomp and no service account token`, () => {
    const spec = podSpec(objects);
    expect(spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(spec.securityContext?.runAsUser).toBeGreaterThan(0);
    expect(spec.automountServiceAccountToken).toBe(false);
    expect(spec.serviceAccountName).toBe('social-posts');
    expect(findOne(objects, 'ServiceAccount').automountServiceAccountToken).toBe(false);
  });

  it(`When the ${environment} values are rendered, then the container has a read-only root, no privilege escalation and no capabilities`, () => {
    expect(apiContainer(objects).securityContext).toMatchObject({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ['ALL'] },
    });
  });

  it(`When the ${environment} values are rendered, then /tmp is a writable emptyDir, the only writable mount`, () => {
    const mounts = apiContainer(objects).volumeMounts ?? [];
    expect(mounts.filter((m) => m.readOnly !== true)).toEqual([{ name: 'tmp', mountPath: '/tmp' }]);
    expect(podSpec(objects).volumes?.find((v) => v.name === 'tmp')).toEqual({
      name: 'tmp',
      emptyDir: { sizeLimit: '64Mi' },
    });
    // Any other volume is a Secret's file mounted read-only (prod: the database CA).
    for (const volume of podSpec(objects).volumes ?? [])
      if (volume.name !== 'tmp') expect(volume.secret?.items).toEqual([{ key: 'ca.crt', path: 'ca.crt' }]);
  });

  it(`When the ${environment} values are rendered, then the container requests CPU and memory and has a memory limit`, () => {
    // What each values file asks for, as the pod carries it.
    const expected = {
      dev: { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: '320Mi' } },
      staging: { requests: { cpu: '100m', memory: '192Mi' }, limits: { memory: '384Mi' } },
      prod: { requests: { cpu: '250m', memory: '256Mi' }, limits: { memory: '512Mi' } },
    }[environment];
    expect(apiContainer(objects).resources).toEqual(expected);
  });

  it(`When the ${environment} values are rendered, then a rollout starts a new pod before an old one stops`, () => {
    expect(findOne(objects, 'Deployment').spec?.strategy).toEqual({
      type: 'RollingUpdate',
      rollingUpdate: { maxSurge: 1, maxUnavailable: 0 },
    });
  });
});

describe('Replicas per environment', () => {
  it.each([
    ['dev', 1],
    ['staging', 2],
  ] as const)(
    'When the %s values are rendered, then the Deployment runs %d replica(s)',
    async (environment, replicas) => {
      expect(findOne(await renderEnvironment(environment), 'Deployment').spec?.replicas).toBe(replicas);
    },
  );

  it('When the prod values are rendered, then the autoscaler owns the replica count (the Deployment sets none)', async () => {
    expect(findOne(await renderEnvironment('prod'), 'Deployment').spec?.replicas).toBeUndefined();
  });
});

describe('Image reference', () => {
  it('When no tag is given, then the image is the release of this tree (the chart appVersion)', async () => {
    expect(apiContainer(await renderEnvironment('dev')).image).toBe(
      `ghcr.io/social-posts/social-posts:${treeVersions().app}`,
    );
  });

  it('When skaffold passes repository, tag and digest, then the image is pinned by digest', async () => {
    const digest = `sha256:${'a'.repeat(64)}`;
    const objects = await render(
      valuesOf('dev', {
        'image.repository': 'registry.local/social-posts',
        'image.tag': 'abc123',
        'image.digest': digest,
      }),
    );
    expect(apiContainer(objects).image).toBe(`registry.local/social-posts:abc123@${digest}`);
  });

  it('When skaffold passes an empty digest (image loaded into kind), then the reference is repository:tag', async () => {
    const objects = await render(
      valuesOf('dev', { 'image.repository': 'social-posts', 'image.tag': '3f2a9c', 'image.digest': '' }),
    );
    expect(apiContainer(objects).image).toBe('social-posts:3f2a9c');
  });
});

describe('Rolling on configuration changes', () => {
  /** The pods' checksum annotations, rendered from dev's values with a fixed key and `set`. */
  async function checksums(set: Record<string, string> = {}): Promise<Record<string, string>> {
    const fixedSecret = { 'secret.secretKey': 'a-fixed-signing-key-for-this-test-0123456789' };
    const annotations = podAnnotations(await render(valuesOf('dev', { ...fixedSecret, ...set })));
    return Object.fromEntries(Object.entries(annotations).filter(([key]) => key.startsWith('checksum/')));
  }

  it('When a setting changes, then checksum/config changes and so the pods roll', async () => {
    const before = await checksums();
    const after = await checksums({ 'config.logLevel': 'warn' });
    expect(before['checksum/config']).toMatch(/^[a-f0-9]{64}$/);
    expect(after['checksum/config']).not.toBe(before['checksum/config']);
  });

  it('When the secret changes, then checksum/secret changes; when nothing changes, neither does', async () => {
    const first = await checksums({ 'secret.dbPassword': 'one' });
    const same = await checksums({ 'secret.dbPassword': 'one' });
    const changed = await checksums({ 'secret.dbPassword': 'two' });
    expect(same).toEqual(first);
    expect(changed['checksum/secret']).not.toBe(first['checksum/secret']);
  });
});
