import { apiSelector, findAll, findOne, must, namespaced, render, renderEnvironment, valuesOf } from './helm';

describe('Defaults of optional objects', () => {
  it('When values.yaml alone is rendered, then no autoscaler, disruption budget, network policy, topology spread or PostgreSQL is created', async () => {
    const objects = await render({
      set: { 'database.host': 'db.example.internal', 'secret.dbPassword': 'x', 'secret.generate': 'true' },
    });
    for (const kind of [
      'HorizontalPodAutoscaler',
      'PodDisruptionBudget',
      'NetworkPolicy',
      'StatefulSet',
    ] as const) {
      expect(findAll(objects, kind)).toEqual([]);
    }
    expect(findOne(objects, 'Deployment').spec?.template.spec?.topologySpreadConstraints).toBeUndefined();
  });
});

describe('HorizontalPodAutoscaler', () => {
  it('When the prod values are rendered, then an autoscaler scales the Deployment between 3 and 10 replicas on CPU', async () => {
    const hpa = findOne(await renderEnvironment('prod'), 'HorizontalPodAutoscaler');
    expect(hpa.spec).toMatchObject({
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'social-posts' },
      minReplicas: 3,
      maxReplicas: 10,
    });
  });
});

describe('PodDisruptionBudget', () => {
  it.each([
    ['dev', 0],
    ['staging', 1],
    ['prod', 1],
  ] as const)(
    'When the %s values are rendered, then %d disruption budget(s) exist (only with more than one replica)',
    async (environment, count) => {
      const budgets = findAll(await renderEnvironment(environment), 'PodDisruptionBudget');
      expect(budgets).toHaveLength(count);
      for (const budget of budgets) {
        expect(budget.spec).toEqual({ maxUnavailable: 1, selector: { matchLabels: apiSelector } });
      }
    },
  );
});

describe('NetworkPolicy', () => {
  it('When the prod values are rendered, then API pods accept traffic only from the ingress controller namespace (and labelled clients) on the http port, and from Prometheus on the metrics port', async () => {
    const policy = findOne(await renderEnvironment('prod'), 'NetworkPolicy', 'social-posts');
    expect(policy.spec?.podSelector).toEqual({ matchLabels: apiSelector });
    expect(policy.spec?.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(policy.spec?.ingress).toEqual([
      {
        from: [
          namespaced('ingress-nginx'),
          { podSelector: { matchLabels: { 'social-posts-client': 'true' } } },
        ],
        ports: [{ port: 'http', protocol: 'TCP' }],
      },
      { from: [namespaced('monitoring')], ports: [{ port: 'metrics', protocol: 'TCP' }] },
    ]);
  });

  it('When the staging values are rendered (an external PostgreSQL), then API pods may only resolve names and reach PostgreSQL on its port', async () => {
    const egress = must(
      findOne(await renderEnvironment('staging'), 'NetworkPolicy', 'social-posts').spec?.egress,
      'egress',
    );
    expect(egress).toHaveLength(2);
    expect(egress[0]?.ports?.map((port) => port.port)).toEqual([53, 53]);
    expect(egress[1]).toEqual({
      to: [{ ipBlock: { cidr: '10.20.0.0/24' } }],
      ports: [{ port: 5432, protocol: 'TCP' }],
    });
  });

  it('When the in-chart PostgreSQL and network policies are on, then only the API pods reach the database pod', async () => {
    const objects = await render(valuesOf('dev', { 'networkPolicy.enabled': 'true' }));
    const api = findOne(objects, 'NetworkPolicy', 'social-posts');
    expect(api.spec?.egress?.[1]?.to).toEqual([
      { podSelector: { matchLabels: { ...apiSelector, 'app.kubernetes.io/component': 'database' } } },
    ]);
    const database = findOne(objects, 'NetworkPolicy', 'social-posts-postgresql');
    expect(database.spec?.ingress).toEqual([
      {
        from: [{ podSelector: { matchLabels: apiSelector } }],
        ports: [{ port: 'postgresql', protocol: 'TCP' }],
      },
    ]);
    expect(database.spec?.egress).toEqual([]);
  });
});

describe('Topology spread', () => {
  it('When the prod values are rendered, then API pods spread across zones and, within them, nodes (soft)', async () => {
    const deployment = findOne(await renderEnvironment('prod'), 'Deployment');
    const spread = (topologyKey: string) => ({
      maxSkew: 1,
      topologyKey,
      whenUnsatisfiable: 'ScheduleAnyway',
      labelSelector: { matchLabels: apiSelector },
      matchLabelKeys: ['pod-template-hash'],
    });
    expect(deployment.spec?.template.spec?.topologySpreadConstraints).toEqual([
      spread('topology.kubernetes.io/zone'),
      spread('kubernetes.io/hostname'),
    ]);
  });
});

describe('In-chart PostgreSQL', () => {
  it('When the dev values are rendered, then a single-instance StatefulSet of the official postgres image keeps its data on a claim', async () => {
    const statefulSet = findOne(await renderEnvironment('dev'), 'StatefulSet', 'social-posts-postgresql');
    expect(statefulSet.spec?.replicas).toBe(1);
    const container = must(statefulSet.spec?.template.spec?.containers[0], 'postgres container');
    expect(container.image).toMatch(/^postgres:\d+\.\d+/);
    expect(container.volumeMounts).toContainEqual({ name: 'data', mountPath: '/var/lib/postgresql/data' });
    expect(statefulSet.spec?.volumeClaimTemplates?.[0]?.spec).toMatchObject({
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '1Gi' } },
    });
  });

  it('When the dev values are rendered, then PostgreSQL has pg_isready probes and a hardened, non-root container', async () => {
    const statefulSet = findOne(await renderEnvironment('dev'), 'StatefulSet');
    const spec = must(statefulSet.spec?.template.spec, 'pod spec');
    const container = must(spec.containers[0], 'postgres container');
    expect(container.readinessProbe?.exec?.command?.[0]).toBe('pg_isready');
    expect(container.livenessProbe?.exec?.command?.[0]).toBe('pg_isready');
    expect(spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 999,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(container.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
    expect(container.resources?.limits?.memory).toBeDefined();
  });

  it('When the dev values are rendered, then the API reaches PostgreSQL through a Service named like DB_HOSTNAME', async () => {
    const service = findOne(await renderEnvironment('dev'), 'Service', 'social-posts-postgresql');
    expect(service.spec?.ports).toEqual([
      { name: 'postgresql', port: 5432, targetPort: 'postgresql', protocol: 'TCP' },
    ]);
    expect(service.spec?.selector).toEqual({ ...apiSelector, 'app.kubernetes.io/component': 'database' });
  });

  it.each(['staging', 'prod'] as const)(
    'When the %s values are rendered, then no in-chart PostgreSQL exists',
    async (environment) => {
      const objects = await renderEnvironment(environment);
      expect(findAll(objects, 'StatefulSet')).toEqual([]);
      expect(findAll(objects, 'Service')).toHaveLength(1);
    },
  );
});
