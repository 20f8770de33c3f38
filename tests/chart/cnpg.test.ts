/**
 * The CloudNativePG option (cnpg.enabled): the Cluster and Pooler the chart renders, checked
 * against CloudNativePG's own CRDs (tests/chart/schemas/), and how the API pods reach them:
 * through the Pooler, over TLS verified against the cluster's CA and host name, with the owner's
 * credentials from CloudNativePG's Secret, within the connection budget checked at render.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { expectCrdValid, problemsAgainstCrd } from './crd-schemas';
import {
  apiContainer,
  apiSelector,
  configMapData,
  findAll,
  findOne,
  kubeDns,
  must,
  namespaced,
  podSpec,
  pooler,
  refusedEach,
  render,
  renderedBeforeAll,
  renderEnvironment,
  repoRoot,
  valuesOf,
  type KubeObject,
  type RenderOptions,
} from './helm';

const cnpgOn = { 'cnpg.enabled': 'true', 'secret.secretKey': 'a-test-signing-key-of-at-least-32-characters' };
const withCnpg = (set: Record<string, string>, options: RenderOptions = {}): RenderOptions => ({
  ...options,
  set: { ...cnpgOn, ...set },
});

/** The pods of the rw or ro PgBouncer, as policies select them. */
const poolerPods = (type: 'rw' | 'ro') => ({
  podSelector: { matchLabels: { 'cnpg.io/poolerName': `social-posts-db-pooler-${type}` } },
});

/** The API's egress rules to PostgreSQL's port. */
const databaseEgress = (objects: KubeObject[]) =>
  must(findOne(objects, 'NetworkPolicy', 'social-posts').spec?.egress, 'egress').filter((rule) =>
    rule.ports?.some((port) => port.port === 5432),
  );

const prod = renderedBeforeAll(() => renderEnvironment('prod'));

/** Each Pooler's PgBouncer settings in prod: 3 replicas at least x a pool of 10, over 2 PgBouncers. */
const prodPgBouncer = {
  max_client_conn: '1000',
  default_pool_size: '15',
  max_prepared_statements: '200',
  // PgBouncer's default would keep writes down that long after a failover.
  server_login_retry: '2',
};

describe('CloudNativePG: what prod renders', () => {
  it('When the prod values are rendered, then three instances replicate synchronously to one standby and a failover promotes only a standby that has every synchronous commit, so an acknowledged write survives it', () => {
    const cluster = findOne(prod, 'Cluster');
    expect(cluster.metadata.name).toBe('social-posts-db');
    expect(cluster.spec.instances).toBe(3);
    expect(cluster.spec.postgresql.synchronous).toEqual({
      method: 'any',
      number: 1,
      dataDurability: 'required',
      failoverQuorum: true,
    });
    expect(cluster.metadata.annotations?.['helm.sh/resource-policy']).toBe('keep');
  });

  it("When the prod values are rendered, then initdb makes the service's database and owner, with pg_trgm made by the superuser", () => {
    const initdb = must(findOne(prod, 'Cluster').spec.bootstrap.initdb, 'initdb');
    expect(initdb.database).toBe('social_posts');
    expect(initdb.owner).toBe('social_posts');
    expect(initdb.secret).toBeUndefined();
    expect(initdb.postInitApplicationSQL).toEqual(['CREATE EXTENSION IF NOT EXISTS pg_trgm']);
    // Unicode letter case in the database's own functions, not initdb's default C (ASCII alone).
    expect([initdb.localeProvider, initdb.builtinLocale, initdb.localeCType, initdb.localeCollate]).toEqual([
      'builtin',
      'C.UTF-8',
      'C.UTF-8',
      'C',
    ]);
    // The builtin provider needs PostgreSQL 17 or later: the image prod pins is.
    const image = findOne(prod, 'Cluster').spec.imageName ?? '';
    expect(Number(/postgresql:(\d+)\./.exec(image)?.[1])).toBeGreaterThanOrEqual(17);
  });

  it('When the prod values are rendered, then the Pooler pools in transaction mode with PgBouncer settings as strings, prepared statements tracked', () => {
    const rw = pooler(prod, 'rw');
    const cluster = findOne(prod, 'Cluster');
    expect(rw.metadata.name).not.toBe(cluster.metadata.name);
    expect(rw.spec.cluster.name).toBe(cluster.metadata.name);
    expect(rw.spec.instances).toBe(2);
    expect(rw.spec.pgbouncer.poolMode).toBe('transaction');
    expect(rw.spec.pgbouncer.parameters).toEqual(prodPgBouncer);
    expect(configMapData(prod).DB_PREPARED_STATEMENTS).toBe('true');
  });

  it("When the prod values are rendered, then the service dials the Pooler's Service by a name the server certificate carries, over verified TLS", () => {
    const env = configMapData(prod);
    const rw = pooler(prod, 'rw');
    expect(env.DB_HOSTNAME).toBe(rw.metadata.name);
    const names = must(findOne(prod, 'Cluster').spec.certificates, 'certificates').serverAltDNSNames;
    expect(names).toContain(env.DB_HOSTNAME);
    expect(names).toContain(`${rw.metadata.name}.social-posts-prod.svc`);
  });

  it("When the prod values are rendered, then only ca.crt of the cluster's CA Secret is mounted, read-only, where DB_SSL_CA_FILE points", () => {
    const pod = podSpec(prod);
    const volume = must(
      pod.volumes?.find((v) => v.secret?.secretName === 'social-posts-db-ca'),
      'CA volume',
    );
    // The same Secret holds ca.key, the CA's private key: it must never reach the pods.
    expect(volume.secret?.items).toEqual([{ key: 'ca.crt', path: 'ca.crt' }]);
    const mount = must(
      pod.containers[0]?.volumeMounts?.find((m) => m.name === volume.name),
      'CA mount',
    );
    expect(mount.readOnly).toBe(true);
    expect(configMapData(prod).DB_SSL_CA_FILE).toBe(`${mount.mountPath}/ca.crt`);
  });

  it("When the prod values are rendered, then the API may reach only the two Poolers' pods on 5432 (by label), besides DNS", () => {
    expect(databaseEgress(prod)).toEqual([
      { to: [poolerPods('rw'), poolerPods('ro')], ports: [{ port: 5432, protocol: 'TCP' }] },
    ]);
  });

  it('When the prod values are rendered, then the connection budget has room: (10 + 1) x (10 + 1) clients against 1000 per PgBouncer, 2 x 15 server connections against 100', () => {
    const rw = pooler(prod, 'rw');
    const hpa = findOne(prod, 'HorizontalPodAutoscaler');
    const poolMax = Number(configMapData(prod).DB_POOL_MAX);
    const clients = (must(hpa.spec?.maxReplicas, 'maxReplicas') + 1) * (poolMax + 1);
    expect(clients).toBeLessThan(Number(rw.spec.pgbouncer.parameters.max_client_conn) / 2);
    const servers = rw.spec.instances * Number(rw.spec.pgbouncer.parameters.default_pool_size);
    const maxConnections = Number(findOne(prod, 'Cluster').spec.postgresql.parameters.max_connections);
    expect(servers).toBeLessThan(maxConnections / 2);
  });
});

describe('CloudNativePG: options', () => {
  it('When a Pooler breaks the CRD (a misspelt field, an unknown pool mode), then the CRD check names it', () => {
    const pooler = {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Pooler',
      metadata: { name: 'p' },
      spec: { cluster: { name: 'c' }, pgbouncer: { poolMode: 'statement', paramters: {} } },
    };
    expect(problemsAgainstCrd(pooler)).toEqual(
      expect.arrayContaining([
        expect.stringContaining('/spec/pgbouncer/poolMode'),
        expect.stringContaining('(paramters)'),
      ]),
    );
  });

  it("When the operator manages the owner's password (cnpg.cluster.appSecret), then initdb and the pods use that basic-auth Secret", async () => {
    const objects = await render(withCnpg({ 'cnpg.cluster.appSecret': 'db-owner' }));
    expect(findOne(objects, 'Cluster').spec.bootstrap.initdb?.secret).toEqual({ name: 'db-owner' });
    const container = apiContainer(objects);
    expect(container.env?.find((e) => e.name === 'DB_PASSWORD')?.valueFrom?.secretKeyRef).toEqual({
      name: 'db-owner',
      key: 'password',
    });
    // The chart's Secret still holds the signing key, and nothing for the database.
    expect(Object.keys(must(findOne(objects, 'Secret').data, 'Secret data'))).toEqual(['SECRET_KEY']);
  });

  it("When the Pooler is off, then the service dials the Cluster's -rw Service and the policy names the Cluster's pods", async () => {
    const objects = await render(
      withCnpg(
        {
          'cnpg.pooler.enabled': 'false',
          'cnpg.reads.pooler.enabled': 'false',
          'networkPolicy.enabled': 'true',
        },
        { setJson: { 'networkPolicy.cnpg.apiServer.cidrs': ['10.0.0.1/32'] } },
      ),
    );
    expect(findAll(objects, 'Pooler')).toEqual([]);
    expect(configMapData(objects).DB_READ_HOSTNAME).toBe('social-posts-db-ro');
    expect(configMapData(objects).DB_HOSTNAME).toBe('social-posts-db-rw');
    // CloudNativePG's own server certificate already names the -rw Service.
    expect(findOne(objects, 'Cluster').spec.certificates).toBeUndefined();
    expect(databaseEgress(objects).map((rule) => rule.to)).toEqual([
      [{ podSelector: { matchLabels: { 'cnpg.io/cluster': 'social-posts-db' } } }],
    ]);
  });

  it('When one instance is asked for, then no synchronous replication is rendered (there is no standby to wait for)', async () => {
    const objects = await render(withCnpg({ 'cnpg.cluster.instances': '1' }));
    const cluster = findOne(objects, 'Cluster');
    expectCrdValid(cluster);
    expect(cluster.spec.postgresql.synchronous).toBeUndefined();
  });

  it('When failoverQuorum is turned off, then the Cluster promotes the most advanced reachable standby, as CloudNativePG does by default', async () => {
    const objects = await render(withCnpg({ 'cnpg.cluster.synchronous.failoverQuorum': 'false' }));
    const cluster = findOne(objects, 'Cluster');
    expectCrdValid(cluster);
    expect(cluster.spec.postgresql.synchronous).toMatchObject({
      dataDurability: 'required',
      failoverQuorum: false,
    });
  });

  it('When synchronous_commit asks a standby for more (remote_apply), then the Cluster gets it beside the synchronous standby', async () => {
    const objects = await render(
      withCnpg({}, { setString: { 'cnpg.cluster.parameters.synchronous_commit': 'remote_apply' } }),
    );
    const cluster = findOne(objects, 'Cluster');
    expectCrdValid(cluster);
    expect(cluster.spec.postgresql.parameters.synchronous_commit).toBe('remote_apply');
    expect(cluster.spec.postgresql.synchronous).toMatchObject({ dataDurability: 'required' });
  });

  it('When more PgBouncer settings are given, then they join the managed ones and may replace server_login_retry', async () => {
    const objects = await render(
      withCnpg(
        {},
        {
          setString: {
            'cnpg.pooler.parameters.query_wait_timeout': '30',
            'cnpg.pooler.parameters.server_login_retry': '5',
          },
        },
      ),
    );
    for (const type of ['rw', 'ro'] as const)
      expect(pooler(objects, type).spec.pgbouncer.parameters).toMatchObject({
        query_wait_timeout: '30',
        server_login_retry: '5',
        max_client_conn: '1000',
      });
  });

  it("When the chart's monitoring is on, then PodMonitors select the Cluster's and the Pooler's pods on their metrics port", async () => {
    const objects = await render(withCnpg({ 'metrics.serviceMonitor.enabled': 'true' }));
    const monitors = findAll(objects, 'PodMonitor');
    expect(monitors.map((m) => m.spec.selector.matchLabels)).toEqual([
      // CloudNativePG's PgBouncer pods carry cnpg.io/cluster as well: without the role they would be scraped twice.
      { 'cnpg.io/cluster': 'social-posts-db', 'cnpg.io/podRole': 'instance' },
      { 'cnpg.io/poolerName': 'social-posts-db-pooler-rw' },
      { 'cnpg.io/poolerName': 'social-posts-db-pooler-ro' },
    ]);
    for (const monitor of monitors) expect(monitor.spec.podMetricsEndpoints[0]?.port).toBe('metrics');
    const off = await render(withCnpg({}));
    expect(findAll(off, 'PodMonitor')).toEqual([]);
  });
});

describe("CloudNativePG: the instances' and PgBouncers' NetworkPolicies", () => {
  const instances = {
    matchLabels: { 'cnpg.io/cluster': 'social-posts-db' },
    matchExpressions: [{ key: 'cnpg.io/podRole', operator: 'NotIn', values: ['pooler'] }],
  };
  const tcp = (...ports: number[]) => ports.map((port) => ({ port, protocol: 'TCP' }));
  const apiServer = { to: [{ ipBlock: { cidr: '192.0.2.10/32' } }], ports: tcp(443, 6443) };
  const toInstances = { to: [{ podSelector: instances }], ports: tcp(5432) };
  const monitoring = (port: number) => ({ from: [namespaced('monitoring')], ports: tcp(port) });

  it('When the prod values are rendered, then PostgreSQL admits only the PgBouncers, the other instances and the operator, the status port only the operator, metrics only monitoring', () => {
    const policy = findOne(prod, 'NetworkPolicy', 'social-posts-db');
    expect(policy.spec?.podSelector).toEqual(instances);
    expect(policy.spec?.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(policy.spec?.ingress).toEqual([
      {
        from: [poolerPods('rw'), poolerPods('ro'), { podSelector: instances }],
        ports: tcp(5432),
      },
      {
        from: [
          {
            ...namespaced('cnpg-system'),
            podSelector: { matchLabels: { 'app.kubernetes.io/name': 'cloudnative-pg' } },
          },
        ],
        ports: tcp(5432, 8000),
      },
      monitoring(9187),
    ]);
  });

  it('When the prod values are rendered, then the instances reach only DNS, the API server, each other and the object store (HTTPS, no private range)', () => {
    expect(findOne(prod, 'NetworkPolicy', 'social-posts-db').spec?.egress).toEqual([
      kubeDns,
      apiServer,
      toInstances,
      {
        to: [
          {
            ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16'] },
          },
        ],
        ports: tcp(443),
      },
    ]);
  });

  it.each(['social-posts-db-pooler-rw', 'social-posts-db-pooler-ro'])(
    'When the prod values are rendered, then the PgBouncers of %s admit only the API pods (and monitoring on 9127) and reach only DNS, the API server and the instances',
    (name) => {
      const policy = findOne(prod, 'NetworkPolicy', name);
      expect(policy.spec?.podSelector).toEqual({ matchLabels: { 'cnpg.io/poolerName': name } });
      expect(policy.spec?.ingress).toEqual([
        { from: [{ podSelector: { matchLabels: apiSelector } }], ports: tcp(5432) },
        monitoring(9127),
      ]);
      expect(policy.spec?.egress).toEqual([kubeDns, apiServer, toInstances]);
    },
  );

  it('When the Pooler and backups are off, then the API pods reach PostgreSQL directly and nothing reaches the object store', async () => {
    const rendered = await render(
      valuesOf('prod', {
        'cnpg.pooler.enabled': 'false',
        'cnpg.reads.pooler.enabled': 'false',
        'backup.enabled': 'false',
        'autoscaling.maxReplicas': '5',
      }),
    );
    const policy = findOne(rendered, 'NetworkPolicy', 'social-posts-db');
    expect(policy.spec?.ingress?.[0]?.from).toEqual([
      { podSelector: { matchLabels: apiSelector } },
      { podSelector: instances },
    ]);
    expect(policy.spec?.egress).toEqual([kubeDns, apiServer, toInstances]);
    expect(
      findAll(rendered, 'NetworkPolicy')
        .map((p) => p.metadata?.name)
        .sort(),
    ).toEqual(['social-posts', 'social-posts-db']);
  });

  it('When the operator runs elsewhere and the store is in the cluster, then the policies name them', async () => {
    const rendered = await render({
      values: ['values-prod.yaml'],
      set: { 'networkPolicy.cnpg.operatorNamespace': 'postgres-operator' },
      setJson: {
        'networkPolicy.cnpg.objectStore.to': [namespaced('minio')],
        'networkPolicy.cnpg.objectStore.ports': [9000],
      },
    });
    const policy = findOne(rendered, 'NetworkPolicy', 'social-posts-db');
    expect(policy.spec?.ingress?.[1]?.from?.[0]?.namespaceSelector).toEqual(
      namespaced('postgres-operator').namespaceSelector,
    );
    expect(policy.spec?.egress?.[3]).toEqual({ to: [namespaced('minio')], ports: tcp(9000) });
  });
});

describe('CloudNativePG: values that cannot work fail the render with one line', () => {
  // Free-form parameters are strings (the CRD's type), hence --set-string for them.
  refusedEach<RenderOptions>([
    [
      'the in-chart PostgreSQL is on as well',
      { set: { 'postgresql.enabled': 'true' } },
      'cnpg.enabled and postgresql.enabled both choose the database',
    ],
    [
      'an external host is named as well',
      { set: { 'database.host': 'db.example.internal' } },
      'database.host names an external PostgreSQL while cnpg.enabled makes one',
    ],
    [
      'the Pooler is named like the Cluster',
      { set: { 'cnpg.cluster.name': 'pg', 'cnpg.pooler.name': 'pg' } },
      "cnpg.pooler.name must differ from the Cluster's name",
    ],
    [
      'a pooler size is set through the free-form parameters',
      { setString: { 'cnpg.pooler.parameters.max_client_conn': '5000' } },
      'cnpg.pooler.parameters.max_client_conn: set it with its own value',
    ],
    [
      "the cluster's max_connections is set through the free-form parameters",
      { setString: { 'cnpg.cluster.parameters.max_connections': '500' } },
      'cnpg.cluster.parameters.max_connections: set cnpg.cluster.maxConnections',
    ],
    // Either acknowledges a commit that a failover (local) or a crash (off) loses.
    [
      'commits return before a standby has them',
      { setString: { 'cnpg.cluster.parameters.synchronous_commit': 'local' } },
      'cnpg.cluster.parameters.synchronous_commit "local" acknowledges a commit before a standby has it',
    ],
    [
      'commits return before a standby has them, where writes go on without one',
      {
        set: { 'cnpg.cluster.synchronous.dataDurability': 'preferred' },
        setString: { 'cnpg.cluster.parameters.synchronous_commit': 'local' },
      },
      'cnpg.cluster.parameters.synchronous_commit "local" acknowledges a commit before a standby has it',
    ],
    [
      'commits return before the disk has them',
      { setString: { 'cnpg.cluster.parameters.synchronous_commit': 'off' } },
      'cnpg.cluster.parameters.synchronous_commit "off" acknowledges a commit before the primary\'s disk has it',
    ],
    [
      'prepared statements are on and PgBouncer tracks none',
      { set: { 'cnpg.pooler.maxPreparedStatements': '0' } },
      'database.preparedStatements is true but cnpg.pooler.maxPreparedStatements is 0',
    ],
  ])('When %s, then helm template fails naming it', (options) =>
    withCnpg(options.set ?? {}, { setString: options.setString }),
  );
});

describe('The connection budget, checked at render', () => {
  refusedEach<RenderOptions>([
    [
      'the pods could open more connections than one PgBouncer takes',
      valuesOf('prod', { 'autoscaling.maxReplicas': '100' }),
      'connection budget: (100 replicas at most + 1 surge) x (database.poolMax 10 + 1 migration connection) = 1111 connections exceed cnpg.pooler.maxClientConn 1000',
    ],
    [
      "the Pooler's server pools exceed the cluster's max_connections",
      valuesOf('prod', { 'cnpg.pooler.defaultPoolSize': '60' }),
      'connection budget: cnpg.pooler.instances 2 x default_pool_size 60 = 120 server connections exceed cnpg.cluster.maxConnections 100',
    ],
    [
      'an external server without a pooler gets more than its max_connections',
      valuesOf('staging', { 'secret.dbPassword': 'x', replicaCount: '9' }),
      'connection budget: (9 replicas at most + 1 surge) x (database.poolMax 10 + 1 migration connection) = 110 connections exceed database.maxConnections 100 less 3 superuser-reserved',
    ],
    [
      'the in-chart PostgreSQL gets more than its max_connections',
      valuesOf('dev', { 'database.poolMax': '60' }),
      'connection budget: (1 replicas at most + 1 surge) x (database.poolMax 60 + 1 migration connection) = 122 connections exceed database.maxConnections 100',
    ],
    [
      'the pods could open more read connections than one ro PgBouncer takes',
      valuesOf('prod', { 'cnpg.reads.pooler.maxClientConn': '100' }),
      'read connection budget: (10 replicas at most + 1 surge) x (read pool 10) = 110 connections exceed cnpg.reads.pooler.maxClientConn 100',
    ],
    [
      "the ro Pooler's server pools exceed one standby's max_connections",
      valuesOf('prod', { 'cnpg.reads.pooler.defaultPoolSize': '50' }),
      'read connection budget: cnpg.reads.pooler.instances 2 x default_pool_size 50 = 100 server connections, which may all reach one standby, exceed cnpg.cluster.maxConnections 100 less 10',
    ],
    [
      "without the ro Pooler, the read pools exceed one standby's max_connections",
      valuesOf('prod', { 'cnpg.reads.pooler.enabled': 'false', 'cnpg.reads.poolMax': '9' }),
      'read connection budget: (10 replicas at most + 1 surge) x (read pool 9) = 99 connections, which may all reach one standby, exceed cnpg.cluster.maxConnections 100 less 3 superuser-reserved',
    ],
  ])(
    'When %s, then helm template fails with one line naming the numbers',
    (options) => options,
    // helm's own hint (--debug) follows on later lines; the template's message is one line.
    (stderr) => stderr.split('\n')[0] ?? '',
  );
});

describe('Reads on standbys (cnpg.reads): the ro Pooler and the read endpoint', () => {
  it("When the prod values are rendered, then a second Pooler of type ro pools the standbys in transaction mode, sized by the fleet's read pools", () => {
    const ro = pooler(prod, 'ro');
    expect(ro.metadata.name).toBe('social-posts-db-pooler-ro');
    expect(ro.spec.cluster.name).toBe('social-posts-db');
    expect(ro.spec.instances).toBe(2);
    expect(ro.spec.pgbouncer.poolMode).toBe('transaction');
    // The read pool is database.poolMax as well.
    expect(ro.spec.pgbouncer.parameters).toEqual(prodPgBouncer);
  });

  it('When the prod values are rendered, then the pods read from the ro Pooler by a name the server certificate carries, within 1000 ms of the primary', () => {
    const env = configMapData(prod);
    expect(env).toMatchObject({
      DB_READ_HOSTNAME: 'social-posts-db-pooler-ro',
      DB_READ_PORT: '5432',
      DB_READ_POOL_MAX: '10',
      DB_READ_MAX_LAG_MS: '1000',
    });
    const names = must(findOne(prod, 'Cluster').spec.certificates, 'certificates').serverAltDNSNames;
    for (const name of ['social-posts-db-pooler-ro', 'social-posts-db-pooler-ro.social-posts-prod.svc'])
      expect(names).toContain(name);
    // The rw Pooler's names stay.
    expect(names).toContain('social-posts-db-pooler-rw');
  });

  it('When the prod values are rendered, then a standby is ready (in the -ro Service) only while streaming within 64Mi of replay', () => {
    expect(findOne(prod, 'Cluster').spec.probes).toEqual({
      readiness: { type: 'streaming', maximumLag: '64Mi' },
    });
  });

  it('When reads on standbys are off, or there is no standby, then there is no ro Pooler, no read endpoint and no streaming probe', async () => {
    const cases: Record<string, string>[] = [
      { 'cnpg.reads.enabled': 'false' },
      { 'cnpg.cluster.instances': '1' },
    ];
    for (const set of cases) {
      const rendered = await render(valuesOf('prod', set));
      expect(findAll(rendered, 'Pooler').map((p) => p.spec.type)).toEqual(['rw']);
      expect(Object.keys(configMapData(rendered)).filter((key) => key.startsWith('DB_READ_'))).toEqual([]);
      expect(findOne(rendered, 'Cluster').spec.probes).toBeUndefined();
      expect(findAll(rendered, 'NetworkPolicy').map((p) => p.metadata?.name)).not.toContain(
        'social-posts-db-pooler-ro',
      );
      expect(findOne(rendered, 'Cluster').spec.certificates?.serverAltDNSNames).not.toContain(
        'social-posts-db-pooler-ro',
      );
    }
  });

  it("When the ro Pooler is off, then the pods read from the Cluster's -ro Service and may reach the instances, which admit them", async () => {
    const rendered = await render(
      valuesOf('prod', { 'cnpg.reads.pooler.enabled': 'false', 'cnpg.reads.poolMax': '8' }),
    );
    expect(findAll(rendered, 'Pooler').map((p) => p.spec.type)).toEqual(['rw']);
    expect(configMapData(rendered).DB_READ_HOSTNAME).toBe('social-posts-db-ro');
    expect(databaseEgress(rendered).map((rule) => rule.to)).toEqual([
      [
        poolerPods('rw'),
        // The instances only (the -ro Service's endpoints), not the PgBouncers that share cnpg.io/cluster.
        {
          podSelector: {
            matchLabels: { 'cnpg.io/cluster': 'social-posts-db', 'cnpg.io/podRole': 'instance' },
          },
        },
      ],
    ]);
    const ingress = must(findOne(rendered, 'NetworkPolicy', 'social-posts-db').spec?.ingress, 'ingress');
    expect(ingress[0]?.from?.slice(0, 2)).toEqual([
      poolerPods('rw'),
      { podSelector: { matchLabels: apiSelector } },
    ]);
  });

  it('When the read values are set, then the settings and the probe follow them (an empty maximumLag keeps the default probe)', async () => {
    const rendered = await render({
      values: ['values-prod.yaml'],
      set: { 'cnpg.reads.maxLagMs': '250', 'cnpg.reads.poolMax': '4', 'cnpg.reads.pooler.name': 'reads' },
      setString: { 'cnpg.reads.maximumLag': '' },
    });
    expect(configMapData(rendered)).toMatchObject({
      DB_READ_HOSTNAME: 'reads',
      DB_READ_POOL_MAX: '4',
      DB_READ_MAX_LAG_MS: '250',
    });
    // 3 replicas at least x 4, over 2 PgBouncers.
    expect(pooler(rendered, 'ro').spec.pgbouncer.parameters.default_pool_size).toBe('6');
    expect(findOne(rendered, 'Cluster').spec.probes).toBeUndefined();
  });

  refusedEach<RenderOptions>([
    [
      'the ro Pooler is named like the rw one',
      { set: { 'cnpg.reads.pooler.name': 'social-posts-db-pooler-rw' } },
      "cnpg.reads.pooler.name must differ from the Cluster's name and the rw Pooler's",
    ],
    ["the read bound is under the service's 100 ms", { set: { 'cnpg.reads.maxLagMs': '50' } }, 'maxLagMs'],
    ['the probe lag is not a quantity', { setString: { 'cnpg.reads.maximumLag': '64 MB' } }, 'maximumLag'],
    [
      "the API server's addresses are not given",
      { setJson: { 'networkPolicy.cnpg.apiServer.cidrs': [] } },
      'networkPolicy.cnpg.apiServer.cidrs is required with cnpg.enabled and networkPolicy.enabled',
    ],
  ])('When %s, then helm template fails naming it', (options) => ({
    values: ['values-prod.yaml'],
    ...options,
  }));
});

describe('The kind runner with --cnpg (it cannot run here; these checks keep it true)', () => {
  const runner = readFileSync(resolve(repoRoot, 'k8s-tests/kind/run.sh'), 'utf8');
  const e2e: RenderOptions = {
    values: ['values-dev.yaml', '../k8s-tests/values-e2e.yaml', '../k8s-tests/values-e2e-cnpg.yaml'],
    namespace: 'social-posts-dev',
  };

  it('When the runner installs the operator, then it is the release whose CRDs the chart tests vendor', () => {
    const version = must(/^CNPG_VERSION=(\S+)$/m.exec(runner)?.[1], 'CNPG_VERSION');
    const vendored = readFileSync(resolve(__dirname, 'schemas/README.md'), 'utf8');
    expect(vendored).toContain(`CloudNativePG v${version},`);
  });

  it('When the e2e values turn cnpg on, then the Cluster and Pooler validate and carry the names the runner and the kind driver wait for', async () => {
    const objects = await render(e2e);
    const cluster = findOne(objects, 'Cluster');
    const rw = pooler(objects, 'rw');
    for (const object of [cluster, rw, pooler(objects, 'ro')]) expectCrdValid(object);
    expect(cluster.metadata.name).toBe('social-posts-db');
    expect(runner).toContain('cluster/$RELEASE-db"');
    expect(rw.metadata.name).toBe('social-posts-db-pooler-rw');
    expect(runner).toContain('deployment/$RELEASE-db-pooler-rw"');
    expect(pooler(objects, 'ro').metadata.name).toBe('social-posts-db-pooler-ro');
    expect(runner).toContain('deployment/$RELEASE-db-pooler-ro"');
    // Three instances: after the primary is lost a synchronous standby remains, so writes go on.
    expect(cluster.spec.instances).toBe(3);
    expect(findAll(objects, 'StatefulSet')).toEqual([]);
  });
});
