import type { IEnvVar } from 'kubernetes-models/v1/EnvVar';
import {
  apiContainer,
  configMapData,
  decode,
  environments,
  findAll,
  findOne,
  must,
  podAnnotations,
  refusedEach,
  render,
  renderedBeforeAll,
  renderEnvironment,
  valuesOf,
  type Environment,
  type KubeObject,
} from './helm';

const corsAllowLists: Record<Environment, string> = {
  dev: 'http://localhost:3000,http://localhost:5173',
  staging: 'https://staging.social-posts.example.com',
  prod: 'https://social-posts.example.com,https://www.social-posts.example.com',
};

/** Every environment's database, port and owner. */
const database = { DB_PORT: '5432', DB_NAME: 'social_posts', DB_USERNAME: 'social_posts' };

const databases: Record<Environment, Record<string, string>> = {
  dev: { ...database, DB_HOSTNAME: 'social-posts-postgresql', DB_SSL: 'false' },
  staging: { ...database, DB_HOSTNAME: 'social-posts-staging.postgres.example.internal', DB_SSL: 'true' },
  // CloudNativePG's Pooler, TLS verified against the cluster's CA.
  prod: {
    ...database,
    DB_HOSTNAME: 'social-posts-db-pooler-rw',
    DB_SSL: 'true',
    DB_SSL_CA_FILE: '/etc/social-posts/db-ca/ca.crt',
  },
};

function containerEnv(objects: KubeObject[]): IEnvVar[] {
  return must(apiContainer(objects).env, 'env');
}

describe.each(environments)('Settings of %s', (environment) => {
  const objects = renderedBeforeAll(() => renderEnvironment(environment));

  it(`When the ${environment} values are rendered, then CORS_ALLOWED_ORIGINS is the environment's own allow-list, without a wildcard`, () => {
    const origins = configMapData(objects).CORS_ALLOWED_ORIGINS;
    expect(origins).toBe(corsAllowLists[environment]);
    expect(origins).not.toContain('*');
  });

  it(`When the ${environment} values are rendered, then the pod reads every non-secret setting from the ConfigMap`, () => {
    expect(apiContainer(objects).envFrom).toEqual([{ configMapRef: { name: 'social-posts' } }]);
    expect(configMapData(objects)).toMatchObject({
      NODE_ENV: 'production',
      PORT: '8000',
      SHUTDOWN_DELAY_SECONDS: '5',
      SHUTDOWN_TIMEOUT_SECONDS: '15',
      ACCESS_TOKEN_EXPIRE_MINUTES: '30',
      DB_POOL_MAX: '10',
      DB_STATEMENT_TIMEOUT_MS: '2000',
      DB_PREPARED_STATEMENTS: 'true',
      DB_MIGRATION_TIMEOUT_MS: '240000',
      DB_MIGRATION_LOCK_TIMEOUT_MS: '500',
      DB_STARTUP_WAIT_SECONDS: '120',
    });
    expect(Number(configMapData(objects).BCRYPT_ROUNDS)).toBeGreaterThanOrEqual(10);
  });

  it(`When the ${environment} values are rendered, then DB_HOSTNAME is always set (never the embedded database) and points at the environment's PostgreSQL`, () => {
    expect(configMapData(objects)).toMatchObject(databases[environment]);
    expect(configMapData(objects).DB_EMBEDDED_DIR).toBeUndefined();
  });

  it(`When the ${environment} values are rendered, then SECRET_KEY and DB_PASSWORD come from a Secret, never from the ConfigMap`, () => {
    const secretName = {
      dev: 'social-posts',
      staging: 'social-posts-staging-secrets',
      prod: 'social-posts-secrets',
    }[environment];
    // prod's database password is CloudNativePG's: the owner's basic-auth Secret <cluster>-app.
    const passwordRef =
      environment === 'prod'
        ? { name: 'social-posts-db-app', key: 'password' }
        : { name: secretName, key: 'DB_PASSWORD' };
    // Your own Secret may carry keys accepted during a rotation; the chart's carries them only when given.
    const accepted =
      environment === 'dev'
        ? []
        : [
            {
              name: 'SECRET_KEYS_ACCEPTED',
              valueFrom: { secretKeyRef: { name: secretName, key: 'SECRET_KEYS_ACCEPTED', optional: true } },
            },
          ];
    expect(containerEnv(objects)).toEqual([
      { name: 'SECRET_KEY', valueFrom: { secretKeyRef: { name: secretName, key: 'SECRET_KEY' } } },
      ...accepted,
      { name: 'DB_PASSWORD', valueFrom: { secretKeyRef: passwordRef } },
    ]);
    expect(Object.keys(configMapData(objects))).not.toEqual(expect.arrayContaining(['SECRET_KEY']));
    expect(Object.keys(configMapData(objects))).not.toEqual(expect.arrayContaining(['DB_PASSWORD']));
  });
});

describe('The statement time-out', () => {
  it("When database.statementTimeoutMs is the service's least, 200, then helm accepts it and the pods read it", async () => {
    const objects = await render(valuesOf('dev', { 'database.statementTimeoutMs': '200' }));
    expect(configMapData(objects).DB_STATEMENT_TIMEOUT_MS).toBe('200');
  });

  // A request answers at the latest its database budget plus the cancel grace after it starts.
  refusedEach<Record<string, string>>([
    [
      'a statement time-out the Ingress gives up before',
      { 'database.statementTimeoutMs': '5000' },
      'ingress.proxyReadTimeout (3 s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (5500 ms)',
    ],
    [
      'an Ingress read time-out below the default budget',
      { 'ingress.proxyReadTimeout': '2' },
      'ingress.proxyReadTimeout (2 s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (2500 ms)',
    ],
    [
      'a Gateway read time-out below the default budget',
      { 'gateway.enabled': 'true', 'gateway.parentRef.name': 'gw', 'gateway.timeouts.readSeconds': '2' },
      'gateway.timeouts.readSeconds (2 s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (2500 ms)',
    ],
    [
      'an Ingress read time-out below the default budget beside a Gateway whose time-out outlasts it',
      {
        'gateway.enabled': 'true',
        'gateway.parentRef.name': 'gw',
        'gateway.timeouts.readSeconds': '10',
        'ingress.proxyReadTimeout': '2',
      },
      'ingress.proxyReadTimeout (2 s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (2500 ms)',
    ],
    [
      'a drain shorter than a request may take',
      { 'config.shutdownTimeoutSeconds': '2' },
      'config.shutdownTimeoutSeconds (2 s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (2500 ms)',
    ],
  ])('When the values carry %s, then helm template fails naming both values', (set) => valuesOf('dev', set));

  it('When database.statementTimeoutMs is raised with the proxy read time-out and the drain above it, then helm accepts it', async () => {
    const objects = await render(
      valuesOf('dev', {
        'database.statementTimeoutMs': '10000',
        'ingress.proxyReadTimeout': '11',
        'config.shutdownTimeoutSeconds': '11',
      }),
    );
    expect(configMapData(objects).DB_STATEMENT_TIMEOUT_MS).toBe('10000');
  });
});

describe('Secrets', () => {
  it('When no SECRET_KEY is given (dev), then the chart creates a Secret with a generated 64-character key and a database password', async () => {
    const secret = findOne(await renderEnvironment('dev'), 'Secret', 'social-posts');
    expect(decode(secret, 'SECRET_KEY')).toMatch(/^[A-Za-z0-9]{64}$/);
    expect(decode(secret, 'DB_PASSWORD')).toMatch(/^[A-Za-z0-9]{32}$/);
  });

  it("When an external database is installed with the operator's password, then the chart's Secret holds it", async () => {
    const objects = await render({
      set: {
        'database.host': 'db.example.internal',
        'secret.dbPassword': 'the-operators-password',
        'secret.generate': 'true',
      },
    });
    const secret = findOne(objects, 'Secret', 'social-posts');
    expect(decode(secret, 'DB_PASSWORD')).toBe('the-operators-password');
    expect(decode(secret, 'SECRET_KEY')).toHaveLength(64);
  });

  it('When a key is being rotated (secret.acceptedKeys), then the Secret holds SECRET_KEYS_ACCEPTED comma-separated and the pods read it', async () => {
    const next = 'the-next-signing-key-being-rolled-out-0123456789';
    const previous = 'the-previous-signing-key-still-accepted-012345';
    const objects = await render(
      valuesOf('dev', {
        'secret.secretKey': 'the-current-signing-key-0123456789abcdef',
        'secret.acceptedKeys': `{${next},${previous}}`,
      }),
    );
    expect(decode(findOne(objects, 'Secret'), 'SECRET_KEYS_ACCEPTED')).toBe(`${next},${previous}`);
    expect(containerEnv(objects)).toContainEqual({
      name: 'SECRET_KEYS_ACCEPTED',
      valueFrom: { secretKeyRef: { name: 'social-posts', key: 'SECRET_KEYS_ACCEPTED' } },
    });
  });

  it('When prod names an existing Secret, then the chart creates no Secret and skips the secret checksum', async () => {
    const objects = await renderEnvironment('prod');
    expect(findAll(objects, 'Secret')).toEqual([]);
    expect(Object.keys(podAnnotations(objects))).toEqual(['checksum/config']);
  });

  it('When SECRET_KEY is given in values, then the Secret holds exactly that key', async () => {
    const key = 'an-operator-chosen-signing-key-0123456789';
    const objects = await render(valuesOf('dev', { 'secret.secretKey': key }));
    expect(decode(findOne(objects, 'Secret'), 'SECRET_KEY')).toBe(key);
  });

  it('When the in-chart PostgreSQL is used, then it reads its password from the same Secret key as the API', async () => {
    const objects = await renderEnvironment('dev');
    const statefulSet = findOne(objects, 'StatefulSet');
    const env = statefulSet.spec?.template.spec?.containers[0]?.env ?? [];
    expect(env.find((variable) => variable.name === 'POSTGRES_PASSWORD')).toEqual({
      name: 'POSTGRES_PASSWORD',
      valueFrom: { secretKeyRef: { name: 'social-posts', key: 'DB_PASSWORD' } },
    });
  });
});
