/**
 * Backups and point-in-time recovery (backup.*): the Barman Cloud plugin's ObjectStore, the Cluster's
 * plugins entry and the ScheduledBackup, checked against the vendored CRDs (tests/chart/schemas/); the
 * recovery values bootstrapping a new Cluster from the archive; values that cannot work refused at render.
 */
import type { ISecretKeySelector } from 'kubernetes-models/v1/SecretKeySelector';
import { expectCrdValid, problemsAgainstCrd } from './crd-schemas';
import { templateBeside } from './fake-kube-api';
import {
  allRenderings,
  apiContainer,
  configMapData,
  environmentOptions,
  findAll,
  findOne,
  installNotes,
  must,
  podSpec,
  pooler,
  recoveryOptions,
  render,
  renderedBeforeAll,
  renderEnvironment,
  refusedEach,
  template,
  type KubeObject,
  type RenderOptions,
} from './helm';

const PLUGIN = 'barman-cloud.cloudnative-pg.io';

/** CloudNativePG on with a bucket and its credentials: what an operator sets to turn backups on. */
const backupOn: RenderOptions = {
  set: {
    'cnpg.enabled': 'true',
    'secret.secretKey': 'a-test-signing-key-of-at-least-32-characters',
    'backup.enabled': 'true',
    'backup.objectStore.destinationPath': 's3://bucket/social-posts',
    'backup.objectStore.existingSecret': 'store-keys',
  },
};

const withBackup = (set: Record<string, string>): RenderOptions => ({
  set: { ...backupOn.set, ...set },
});

/** The ObjectStore rendered with backups on and `set`. */
const storeWith = async (set: Record<string, string>) =>
  findOne(await render(withBackup(set)), 'ObjectStore');

/** The recovery values with `set` on top. */
const recoveryWith = (set: Record<string, string>): RenderOptions => ({ ...recoveryOptions, set });

/** Each cloud's workload identity in place of the Secret's keys. */
const irsa = { 'backup.objectStore.existingSecret': '', 'backup.objectStore.s3.inheritFromIAMRole': 'true' };
const gkeIdentity = {
  'backup.objectStore.provider': 'google',
  'backup.objectStore.destinationPath': 'gs://bucket/social-posts',
  'backup.objectStore.existingSecret': '',
  'backup.objectStore.google.gkeEnvironment': 'true',
};
const azureIdentity = {
  'backup.objectStore.provider': 'azure',
  'backup.objectStore.destinationPath': 'https://account.blob.core.windows.net/backups/social-posts',
  'backup.objectStore.existingSecret': '',
  'backup.objectStore.azure.inheritFromAzureAD': 'true',
};

/** The ObjectStore's configuration as the store table expects it, so that a misspelt key fails to compile. */
interface StoreConfiguration {
  endpointURL: string;
  endpointCA: ISecretKeySelector;
  s3Credentials: SecretKeys<'accessKeyId' | 'secretAccessKey' | 'region'> & { inheritFromIAMRole?: true };
  azureCredentials: SecretKeys<'storageAccount' | 'storageKey'> & { inheritFromAzureAD?: true };
  googleCredentials: SecretKeys<'applicationCredentials'> & { gkeEnvironment?: true };
}
type SecretKeys<Name extends string> = Partial<Record<Name, ISecretKeySelector>>;

const ARN = 'arn:aws:iam::123456789012:role/social-posts-backup';
const IRSA = 'eks.amazonaws.com/role-arn';
const GKE = 'iam.gke.io/gcp-service-account';
const AZURE_CLIENT = 'azure.workload.identity/client-id';
const AZURE_USE = 'azure.workload.identity/use';
/** A key of a map value for --set and --set-string: helm splits keys at unescaped dots. */
const mapKey = (path: string, key: string) => `${path}.${key.replaceAll('.', '\\.')}`;
const SA_ANNOTATIONS = 'cnpg.cluster.serviceAccount.annotations';

describe('Backups: what prod renders', () => {
  const objects = renderedBeforeAll(() => renderEnvironment('prod'));

  it('When the prod values are rendered, then an ObjectStore archives to the bucket with credentials from the Secret, gzip, 30 days kept', () => {
    const store = findOne(objects, 'ObjectStore');
    expect(store.apiVersion).toBe('barmancloud.cnpg.io/v1');
    expect(store.spec.retentionPolicy).toBe('30d');
    expect(store.spec.configuration).toEqual({
      destinationPath: 's3://social-posts-example-backups/prod',
      s3Credentials: {
        accessKeyId: { name: 'social-posts-backup-credentials', key: 'ACCESS_KEY_ID' },
        secretAccessKey: { name: 'social-posts-backup-credentials', key: 'ACCESS_SECRET_KEY' },
      },
      wal: { compression: 'gzip', maxParallel: 2 },
      data: { compression: 'gzip', jobs: 2 },
    });
    expect(store.metadata.annotations?.['helm.sh/resource-policy']).toBe('keep');
  });

  it('When the prod values are rendered, then the Cluster archives its WAL through the plugin into that ObjectStore, in a folder of its own name, at least once a minute', () => {
    const cluster = findOne(objects, 'Cluster');
    expect(cluster.spec.plugins).toEqual([
      {
        name: PLUGIN,
        isWALArchiver: true,
        parameters: {
          barmanObjectName: findOne(objects, 'ObjectStore').metadata.name,
          serverName: 'social-posts-db',
        },
      },
    ]);
    expect(cluster.spec.postgresql.parameters.archive_timeout).toBe('60s');
    expect(cluster.spec.bootstrap.recovery).toBeUndefined();
    expect(cluster.spec.externalClusters).toBeUndefined();
    // Prod authenticates with a Secret: the operator's ServiceAccount and pods keep their own metadata.
    expect(cluster.spec.serviceAccountTemplate).toBeUndefined();
    expect(cluster.spec.inheritedMetadata).toBeUndefined();
  });

  it('When the prod values are rendered, then a ScheduledBackup takes a plugin base backup of the Cluster daily, the first at once', () => {
    const scheduled = findOne(objects, 'ScheduledBackup');
    expect(scheduled.apiVersion).toBe('postgresql.cnpg.io/v1');
    expect(scheduled.spec).toEqual({
      cluster: { name: findOne(objects, 'Cluster').metadata.name },
      schedule: '0 0 3 * * *',
      immediate: true,
      backupOwnerReference: 'self',
      method: 'plugin',
      pluginConfiguration: { name: PLUGIN },
    });
  });

  it("When the prod values are rendered, then the PostgreSQL image is an exact CloudNativePG image of the same major version as dev's PostgreSQL", async () => {
    const image = must(findOne(objects, 'Cluster').spec.imageName, 'imageName');
    // CloudNativePG's default release, pinned by the digest its image catalog lists.
    expect(image).toBe(
      'ghcr.io/cloudnative-pg/postgresql:18.4-202608130737-system-trixie@sha256:42708a75345b7a48fdd9257b071830783a97fd228529196b6313187a7198e185',
    );
    expect(image).toMatch(/@sha256:[0-9a-f]{64}$/);
    const prodMajor = must(
      /^ghcr\.io\/cloudnative-pg\/postgresql:(\d+)\.\d+-/.exec(image)?.[1],
      'prod major',
    );
    const dev = findOne(await renderEnvironment('dev'), 'StatefulSet', 'social-posts-postgresql');
    const devImage = must(dev.spec?.template.spec?.containers[0]?.image, 'dev image');
    const devMajor = must(/^postgres:(\d+)\.\d+-/.exec(devImage)?.[1], 'dev major');
    expect(devMajor).toBe(prodMajor);
  });
});

describe('Backups: which values files render them, and the CRD check', () => {
  // The schema tests validate every object of these renderings against its CRD.
  it.each(allRenderings)(
    'When %s are rendered, then there is an ObjectStore and a ScheduledBackup with prod and recovery only',
    async (name, renderObjects) => {
      const objects = await renderObjects();
      const expected = ['the prod values', "the recovery values (on prod's)"].includes(name) ? 1 : 0;
      expect(findAll(objects, 'ObjectStore')).toHaveLength(expected);
      expect(findAll(objects, 'ScheduledBackup')).toHaveLength(expected);
    },
  );

  it('When an ObjectStore or a ScheduledBackup breaks its CRD, then the check names the field', () => {
    const store = {
      apiVersion: 'barmancloud.cnpg.io/v1',
      kind: 'ObjectStore',
      metadata: { name: 's' },
      spec: {
        retentionPolicy: '30 days',
        configuration: { destinationPath: 's3://b', data: { compression: 'zstd' }, wall: {} },
      },
    };
    expect(problemsAgainstCrd(store)).toEqual(
      expect.arrayContaining([
        expect.stringContaining('/spec/retentionPolicy'),
        expect.stringContaining('/spec/configuration/data/compression'),
        expect.stringContaining('(wall)'),
      ]),
    );
    const scheduled = {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'ScheduledBackup',
      metadata: { name: 'b' },
      spec: { cluster: { name: 'c' }, schedule: '0 3 * * *', method: 'barman' },
    };
    expect(problemsAgainstCrd(scheduled)).toEqual([expect.stringContaining('/spec/method')]);
  });
});

describe('Backups: options', () => {
  it('When backup is off on a CloudNativePG database, then there is no ObjectStore, ScheduledBackup or plugin entry', async () => {
    const objects = await render(withBackup({ 'backup.enabled': 'false' }));
    expect(findAll(objects, 'ObjectStore')).toEqual([]);
    expect(findAll(objects, 'ScheduledBackup')).toEqual([]);
    expect(findOne(objects, 'Cluster').spec.plugins).toBeUndefined();
  });

  it.each<[string, Record<string, string>, Partial<StoreConfiguration>]>([
    ['IRSA (s3.inheritFromIAMRole)', irsa, { s3Credentials: { inheritFromIAMRole: true } }],
    ['Azure AD workload identity', azureIdentity, { azureCredentials: { inheritFromAzureAD: true } }],
    ['GKE workload identity', gkeIdentity, { googleCredentials: { gkeEnvironment: true } }],
    [
      'an Azure storage account key from the Secret',
      {
        'backup.objectStore.provider': 'azure',
        'backup.objectStore.destinationPath': 'https://account.blob.core.windows.net/backups/social-posts',
      },
      {
        azureCredentials: {
          storageAccount: { name: 'store-keys', key: 'AZURE_STORAGE_ACCOUNT' },
          storageKey: { name: 'store-keys', key: 'AZURE_STORAGE_KEY' },
        },
      },
    ],
    [
      'a Google service account key from the Secret',
      { 'backup.objectStore.provider': 'google', 'backup.objectStore.destinationPath': 'gs://bucket/x' },
      { googleCredentials: { applicationCredentials: { name: 'store-keys', key: 'gcsCredentials' } } },
    ],
    [
      'an S3-compatible store with its own CA and a region',
      {
        'backup.objectStore.endpointURL': 'https://minio.storage.svc:9000',
        'backup.objectStore.endpointCA.secretName': 'minio-ca',
        'backup.objectStore.s3.regionKey': 'REGION',
      },
      {
        endpointURL: 'https://minio.storage.svc:9000',
        endpointCA: { name: 'minio-ca', key: 'ca.crt' },
        s3Credentials: {
          accessKeyId: { name: 'store-keys', key: 'ACCESS_KEY_ID' },
          secretAccessKey: { name: 'store-keys', key: 'ACCESS_SECRET_KEY' },
          region: { name: 'store-keys', key: 'REGION' },
        },
      },
    ],
  ])(
    'When the store is reached with %s, then the ObjectStore carries exactly that and validates',
    async (_case, set, expected) => {
      const store = await storeWith(set);
      expect(store.spec.configuration).toMatchObject(expected);
      for (const key of ['s3Credentials', 'azureCredentials', 'googleCredentials'] as const)
        if (!(key in expected)) expect(store.spec.configuration[key]).toBeUndefined();
      expectCrdValid(store);
    },
  );

  it('When backup.data.immediateCheckpoint is true, then the ObjectStore starts each base backup with an immediate checkpoint', async () => {
    const store = await storeWith({ 'backup.data.immediateCheckpoint': 'true' });
    expectCrdValid(store);
    expect(store.spec.configuration.data).toEqual({
      compression: 'gzip',
      jobs: 2,
      immediateCheckpoint: true,
    });
  });

  it('When compression is off, the schedule, owner and retention change and WAL archiving is off, then the objects follow', async () => {
    const objects = await render(
      withBackup({
        'backup.wal.compression': '',
        'backup.data.compression': '',
        'backup.schedule': '0 30 */6 * * *',
        'backup.immediate': 'false',
        'backup.backupOwnerReference': 'cluster',
        'backup.retentionPolicy': '2w',
        'backup.walArchiving': 'false',
      }),
    );
    const store = findOne(objects, 'ObjectStore');
    expect(store.spec.configuration.wal).toEqual({ maxParallel: 2 });
    expect(store.spec.configuration.data).toEqual({ jobs: 2 });
    expect(store.spec.retentionPolicy).toBe('2w');
    expect(findOne(objects, 'ScheduledBackup').spec).toMatchObject({
      schedule: '0 30 */6 * * *',
      immediate: false,
      backupOwnerReference: 'cluster',
    });
    expect(findOne(objects, 'Cluster').spec.plugins?.[0]?.isWALArchiver).toBe(false);
    for (const object of [store, findOne(objects, 'ScheduledBackup'), findOne(objects, 'Cluster')])
      expectCrdValid(object);
  });
});

describe('Recovery to a point in time (chart/values-recovery.yaml on prod)', () => {
  const prod = renderedBeforeAll(() => renderEnvironment('prod'));
  const objects = renderedBeforeAll(() => render(recoveryOptions));

  it("When the recovery values are rendered, then a NEW Cluster bootstraps from an externalClusters entry that reads prod's folder through the plugin, up to the target time", () => {
    const cluster = findOne(objects, 'Cluster');
    expect(cluster.metadata.name).toBe('social-posts-db-r1');
    expect(cluster.metadata.name).not.toBe(findOne(prod, 'Cluster').metadata.name);
    expect(cluster.spec.bootstrap.initdb).toBeUndefined();
    const recovery = must(cluster.spec.bootstrap.recovery, 'bootstrap.recovery');
    expect(recovery.recoveryTarget).toEqual({ targetTime: '2026-11-26T03:14:00Z' });
    expect([recovery.database, recovery.owner]).toEqual(['social_posts', 'social_posts']);
    const source = cluster.spec.externalClusters?.filter((c) => c.name === recovery.source);
    expect(source).toEqual([
      {
        name: recovery.source,
        plugin: {
          name: PLUGIN,
          parameters: {
            barmanObjectName: findOne(objects, 'ObjectStore').metadata.name,
            serverName: findOne(prod, 'Cluster').spec.plugins?.[0]?.parameters.serverName,
          },
        },
      },
    ]);
  });

  it('When the recovery values are rendered, then the new Cluster archives into a folder of its own, never the one it recovers from', () => {
    const cluster = findOne(objects, 'Cluster');
    const archive = must(cluster.spec.plugins?.[0], 'plugins entry');
    expect(archive).toMatchObject({ name: PLUGIN, isWALArchiver: true });
    expect(archive.parameters.serverName).toBe('social-posts-db-r1');
    expect(archive.parameters.serverName).not.toBe(
      cluster.spec.externalClusters?.[0]?.plugin?.parameters.serverName,
    );
    expect(findOne(objects, 'ScheduledBackup').spec.cluster.name).toBe('social-posts-db-r1');
  });

  it("When the recovery values are rendered, then the service moves onto the new Cluster: its Pooler, its owner's Secret and its CA", () => {
    const poolers = findAll(objects, 'Pooler');
    const name = (rendered: KubeObject[], type: 'rw' | 'ro') => pooler(rendered, type).metadata.name;
    expect(poolers.map((p) => [p.spec.type, p.spec.cluster.name])).toEqual([
      ['rw', 'social-posts-db-r1'],
      ['ro', 'social-posts-db-r1'],
    ]);
    expect(configMapData(objects).DB_HOSTNAME).toBe(name(objects, 'rw'));
    expect(configMapData(objects).DB_READ_HOSTNAME).toBe(name(objects, 'ro'));
    expect(name(objects, 'rw')).not.toBe(name(prod, 'rw'));
    expect(name(objects, 'ro')).not.toBe(name(prod, 'ro'));
    const password = apiContainer(objects).env?.find((e) => e.name === 'DB_PASSWORD');
    expect(password?.valueFrom?.secretKeyRef).toEqual({ name: 'social-posts-db-r1-app', key: 'password' });
    expect(podSpec(objects).volumes?.map((v) => v.secret?.secretName)).toContain('social-posts-db-r1-ca');
  });

  it('When no target time is given, then the Cluster recovers to the end of the archive (a lost cluster)', async () => {
    const cluster = findOne(await render(recoveryWith({ 'backup.recovery.targetTime': '' })), 'Cluster');
    expect(cluster.spec.bootstrap.recovery?.recoveryTarget).toBeUndefined();
    expectCrdValid(cluster);
  });
});

describe("Workload identity: the Cluster's ServiceAccount and pods carry what each cloud needs", () => {
  it.each<[string, Record<string, string>, Record<string, string>, Record<string, string> | undefined]>([
    ['AWS IRSA (s3.inheritFromIAMRole)', irsa, { [IRSA]: ARN }, undefined],
    [
      'GKE Workload Identity (google.gkeEnvironment)',
      gkeIdentity,
      { [GKE]: 'social-posts-backup@my-project.iam.gserviceaccount.com' },
      undefined,
    ],
    [
      'Azure workload identity (azure.inheritFromAzureAD)',
      azureIdentity,
      { [AZURE_CLIENT]: '00000000-0000-0000-0000-000000000000' },
      { [AZURE_USE]: 'true' },
    ],
  ])(
    'When backups use %s, then the Cluster annotates its ServiceAccount (and labels its pods where the cloud needs it), valid against the CRD',
    async (_cloud, set, annotations, podLabels) => {
      const setString: Record<string, string> = {};
      for (const [key, value] of Object.entries(annotations)) setString[mapKey(SA_ANNOTATIONS, key)] = value;
      for (const [key, value] of Object.entries(podLabels ?? {}))
        setString[mapKey('cnpg.cluster.inheritedLabels', key)] = value;
      const objects = await render({ ...withBackup(set), setString });
      const cluster = findOne(objects, 'Cluster');
      expect(cluster.spec.serviceAccountTemplate).toEqual({ metadata: { annotations } });
      expect(cluster.spec.inheritedMetadata).toEqual(podLabels ? { labels: podLabels } : undefined);
      expectCrdValid(cluster);
      expectCrdValid(findOne(objects, 'ObjectStore'));
    },
  );

  it("When the ServiceAccount's labels are given too, then the template carries both, and a recovered Cluster (a new ServiceAccount, named like it) the same", async () => {
    const objects = await render({
      ...recoveryOptions,
      set: irsa,
      setString: { [mapKey(SA_ANNOTATIONS, IRSA)]: ARN, 'cnpg.cluster.serviceAccount.labels.team': 'data' },
    });
    const cluster = findOne(objects, 'Cluster');
    expect(cluster.metadata.name).toBe('social-posts-db-r1');
    expect(cluster.spec.serviceAccountTemplate).toEqual({
      metadata: { annotations: { [IRSA]: ARN }, labels: { team: 'data' } },
    });
    expect(cluster.spec.bootstrap.recovery).toBeDefined();
    expectCrdValid(cluster);
  });

  it('When a serviceAccountTemplate or inheritedMetadata breaks the CRD, then the check names the field', () => {
    const cluster = {
      apiVersion: 'postgresql.cnpg.io/v1',
      kind: 'Cluster',
      metadata: { name: 'c' },
      spec: {
        instances: 1,
        storage: { size: '1Gi' },
        serviceAccountTemplate: { annotations: { [IRSA]: 'arn' } },
        inheritedMetadata: { labels: { [AZURE_USE]: true } },
      },
    };
    expect(problemsAgainstCrd(cluster)).toEqual(
      expect.arrayContaining([
        expect.stringContaining('/spec/serviceAccountTemplate'),
        expect.stringContaining('/spec/inheritedMetadata/labels'),
      ]),
    );
  });

  it('When workload identity is on and the ServiceAccount has no annotation, then the release notes say which setups need one (the render goes on: EKS Pod Identity and node identities need none)', async () => {
    const options: RenderOptions = { ...environmentOptions('prod'), set: irsa };
    const bare = await installNotes(options);
    expect(bare).toContain(
      'Backups authenticate by workload identity, and the Cluster\'s ServiceAccount "social-posts-db" has no annotation',
    );
    expect(bare).toContain('"Workload identity"');
    const annotated = await installNotes({
      ...options,
      setString: { [mapKey(SA_ANNOTATIONS, IRSA)]: ARN },
    });
    expect(annotated).not.toContain('Backups authenticate by workload identity');
    // Prod as shipped authenticates with its Secret: no such note.
    expect(await installNotes(environmentOptions('prod'))).not.toContain(
      'Backups authenticate by workload identity',
    );
  });
});

describe('Backups and recovery: values that cannot work fail the render', () => {
  refusedEach<RenderOptions>([
    [
      'backup is on without a bucket',
      withBackup({ 'backup.objectStore.destinationPath': '' }),
      'backup.objectStore.destinationPath is required when backup.enabled',
    ],
    [
      'prod is rendered with its bucket removed',
      { values: ['values-prod.yaml'], set: { 'backup.objectStore.destinationPath': '' } },
      'backup.objectStore.destinationPath is required when backup.enabled',
    ],
    [
      'backup is on without CloudNativePG',
      withBackup({ 'cnpg.enabled': 'false', 'postgresql.enabled': 'true', 'secret.generate': 'true' }),
      'backup.enabled needs cnpg.enabled',
    ],
    [
      'the bucket is not of the provider',
      withBackup({ 'backup.objectStore.provider': 'google' }),
      'backup.objectStore.destinationPath "s3://bucket/social-posts" does not suit provider google',
    ],
    [
      'there are neither credentials nor workload identity',
      withBackup({ 'backup.objectStore.existingSecret': '' }),
      'backup.objectStore.existingSecret is required for provider s3',
    ],
    [
      'recovery is on without backup',
      recoveryWith({ 'backup.enabled': 'false' }),
      'backup.recovery.enabled needs backup.enabled',
    ],
    [
      'recovery names no source',
      recoveryWith({ 'backup.recovery.sourceServerName': '' }),
      'backup.recovery.sourceServerName is required',
    ],
    [
      'recovery would happen in place (the Cluster keeps its name)',
      recoveryWith({ 'cnpg.cluster.name': 'social-posts-db' }),
      'CloudNativePG recovers only into a new Cluster',
    ],
    [
      'the new Cluster would archive into the folder it recovers from',
      recoveryWith({ 'backup.serverName': 'social-posts-db' }),
      'is also the folder the recovered Cluster would archive to',
    ],
    [
      'a retention policy the plugin does not take',
      withBackup({ 'backup.retentionPolicy': '30 days' }),
      '/backup/retentionPolicy',
    ],
    ['a five-field cron schedule', withBackup({ 'backup.schedule': '0 3 * * *' }), '/backup/schedule'],
    [
      'a target time without a zone',
      recoveryWith({ 'backup.recovery.targetTime': '2026-11-26 03:14' }),
      '/backup/recovery/targetTime',
    ],
    [
      'a compression base backups do not have',
      withBackup({ 'backup.data.compression': 'zstd' }),
      '/backup/data/compression',
    ],
    [
      "Azure's client id is on the ServiceAccount but the pods lack azure.workload.identity/use",
      {
        ...withBackup(azureIdentity),
        setString: { [mapKey(SA_ANNOTATIONS, AZURE_CLIENT)]: '00000000-0000-0000-0000-000000000000' },
      },
      'cnpg.cluster.serviceAccount.annotations names azure.workload.identity/client-id but cnpg.cluster.inheritedLabels lacks azure.workload.identity/use: "true"',
    ],
    [
      'a pod label is given as a boolean, not a string',
      withBackup({ [mapKey('cnpg.cluster.inheritedLabels', AZURE_USE)]: 'true' }),
      '/cnpg/cluster/inheritedLabels',
    ],
  ])('When %s, then helm template fails naming it', (options) => options);
});

/**
 * An upgrade that would stop the live Cluster's WAL archiving is refused unless the operator says so
 * (lookup, answered by a fake API server as `helm upgrade` has the real one answer); a rollback renders
 * nothing, so the notes give the check to run before one.
 */
describe('WAL archiving across upgrades and rollbacks', () => {
  const namespace = 'social-posts-test';

  /** What `helm upgrade` renders beside a cluster holding `live`. */
  const upgradeOver = (live: KubeObject[], options: RenderOptions) =>
    templateBeside(live, { ...options, namespace });

  /** The Cluster as the release's earlier revision left it, with `plugins` as its spec has them. */
  async function liveCluster(plugins: { name: string; isWALArchiver?: boolean }[]): Promise<KubeObject> {
    const rendered = findOne(await render({ ...backupOn, namespace }), 'Cluster');
    const live: KubeObject & { spec: unknown } = {
      ...rendered,
      // Owned by the release, as its install left it: helm then upgrades it instead of refusing to adopt it.
      metadata: {
        ...rendered.metadata,
        namespace,
        annotations: {
          'meta.helm.sh/release-name': 'social-posts',
          'meta.helm.sh/release-namespace': namespace,
        },
      },
      spec: { ...rendered.spec, plugins },
    };
    return live;
  }

  const archiving = () => liveCluster([{ name: PLUGIN, isWALArchiver: true }]);
  const refusal = /this upgrade stops the WAL archiving Cluster "[^"]+" does now/;

  it.each<[string, Record<string, string>]>([
    ['backups are turned off', { 'backup.enabled': 'false' }],
    ['WAL archiving is turned off', { 'backup.walArchiving': 'false' }],
    [
      'CloudNativePG is turned off',
      {
        'cnpg.enabled': 'false',
        'backup.enabled': 'false',
        'postgresql.enabled': 'true',
        'secret.generate': 'true',
      },
    ],
  ])(
    'When the Cluster archives and an upgrade says %s, then rendering refuses and says how to go ahead',
    async (_case, set) => {
      const refused = await upgradeOver([await archiving()], withBackup(set));
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(refusal);
      expect(refused.stderr).toContain('backup.allowArchivingToStop=true');

      const allowed = await upgradeOver(
        [await archiving()],
        withBackup({ ...set, 'backup.allowArchivingToStop': 'true' }),
      );
      expect(allowed.stderr).toBe('');
      expect(allowed.stdout).not.toContain('isWALArchiver: true');
    },
  );

  it('When the Cluster archives and the upgrade keeps backups on, or it never archived, then the upgrade renders', async () => {
    const kept = await upgradeOver([await archiving()], backupOn);
    expect(kept.stderr).toBe('');
    expect(kept.stdout).toContain('isWALArchiver: true');
    for (const live of [await liveCluster([]), await liveCluster([{ name: PLUGIN, isWALArchiver: false }])])
      expect((await upgradeOver([live], withBackup({ 'backup.enabled': 'false' }))).code).toBe(0);
  });

  it("When backups archive, then the notes give the check before a rollback, and that check counts the rendered release's archiver", async () => {
    const notes = await installNotes(backupOn);
    const check = must(
      /helm get manifest .* \| grep -c '(.+)'/.exec(notes),
      'the rollback check in the notes',
    );
    expect(check[0]).toContain(`helm get manifest social-posts -n ${namespace} --revision <revision>`);
    const counted = (manifest: string) =>
      manifest.split('\n').filter((line) => line.includes(check[1] ?? '')).length;
    expect(counted((await template(backupOn)).stdout)).toBe(1);
    expect(counted((await template(withBackup({ 'backup.walArchiving': 'false' }))).stdout)).toBe(0);
    expect(await installNotes(withBackup({ 'backup.walArchiving': 'false' }))).not.toContain(
      'helm get manifest',
    );
  });
});
