import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { postgresServer } from '../../tools/harness/postgres';
import { Relay } from '../../tools/harness/relay';
import { freePort, ROOT, spawnScript, startService, stopAll } from '../../tools/harness/service';
import { freshDatabaseEnv, postgresConnection, TEST_SECRET, testEnv, usingPostgres } from './helpers';

const baseEnv = (overrides: Record<string, string>) =>
  testEnv({ LOG_LEVEL: 'info', PORT: '0', ...overrides });
const spawnService = (env: NodeJS.ProcessEnv, cwd = ROOT) => spawnScript('service/src/main.ts', env, { cwd });

describe('Start-up settings', () => {
  test.each([
    ['PORT', { PORT: 'eighty' }],
    ['SECRET_KEY', { NODE_ENV: 'production', SECRET_KEY: '' }],
    ['SECRET_KEY', { SECRET_KEY: 'too-short' }],
    ['SECRET_KEYS_ACCEPTED', { SECRET_KEYS_ACCEPTED: 'an-accepted-key-long-enough-0123456789,' }],
    ['SECRET_KEYS_ACCEPTED', { SECRET_KEYS_ACCEPTED: 'too-short' }],
    ['SECRET_KEYS_ACCEPTED', { SECRET_KEYS_ACCEPTED: TEST_SECRET }],
    ['BCRYPT_ROUNDS', { NODE_ENV: 'production', BCRYPT_ROUNDS: '8' }],
    ['CORS_ALLOWED_ORIGINS', { CORS_ALLOWED_ORIGINS: '*' }],
    ['CORS_ALLOWED_ORIGINS', { CORS_ALLOWED_ORIGINS: 'https://ok.example.com,https://bad.example.com/path' }],
    ['ACCESS_TOKEN_EXPIRE_MINUTES', { ACCESS_TOKEN_EXPIRE_MINUTES: '0' }],
    ['LOG_LEVEL', { LOG_LEVEL: 'loud' }],
    ['DB_PORT', { DB_HOSTNAME: '127.0.0.1', DB_PORT: '70000' }],
    ['DB_PREPARED_STATEMENTS', { DB_PREPARED_STATEMENTS: 'sometimes' }],
    ['DB_MIGRATION_TIMEOUT_MS', { DB_MIGRATION_TIMEOUT_MS: '10' }],
    ['DB_STARTUP_WAIT_SECONDS', { DB_STARTUP_WAIT_SECONDS: 'forever' }],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }],
    ['OTEL_TRACES_SAMPLER', { OTEL_TRACES_SAMPLER: 'sometimes' }],
    ['OTEL_TRACES_SAMPLER_ARG', { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '10' }],
    ['OTEL_RESOURCE_ATTRIBUTES', { OTEL_RESOURCE_ATTRIBUTES: 'k8s.pod.name' }],
  ])('When %s has a bad value, then the start stops with one line naming it', async (name, overrides) => {
    const svc = spawnService(baseEnv(overrides));
    expect(await svc.exited).toBe(1);
    const lines = svc.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^Invalid setting ${name}: `));
    expect(svc.stdout()).not.toContain('listening');
  });
});

describe('Without the optional dependencies (the production image: npm ci --omit=optional)', () => {
  let dir: string;
  beforeAll(() => {
    // A copy of the sources beside a node_modules of links to every installed package but the
    // embedded database's: module resolution from the copy finds exactly what such an install has.
    dir = mkdtempSync(path.join(tmpdir(), 'sp-no-optional-'));
    for (const entry of ['service/src', 'migrations', 'package.json', 'tsconfig.json'])
      cpSync(path.join(ROOT, entry), path.join(dir, entry), { recursive: true });
    mkdirSync(path.join(dir, 'node_modules'));
    for (const name of readdirSync(path.join(ROOT, 'node_modules'))) {
      if (['@electric-sql', 'knex-pglite', '.bin'].includes(name)) continue;
      symlinkSync(path.join(ROOT, 'node_modules', name), path.join(dir, 'node_modules', name));
    }
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  test('When DB_HOSTNAME is unset, then the start stops with one line saying the embedded database is not installed', async () => {
    const env = baseEnv({});
    delete env.DB_HOSTNAME;
    const svc = spawnService(env, dir);
    expect(await svc.exited).toBe(1);
    const lines = svc.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^start-up failed: DB_HOSTNAME is not set, so the embedded database was chosen, but its packages \(@electric-sql\/pglite, knex-pglite\) are not installed/,
    );
    expect(svc.stdout()).not.toContain('listening');
  });

  test('When DB_HOSTNAME is set, then the embedded database is never loaded: the start gets as far as the database', async () => {
    // A port nothing listens on: the start fails at the migrations, after the modules have loaded.
    const port = await freePort();
    const svc = spawnService(baseEnv({ DB_HOSTNAME: '127.0.0.1', DB_PORT: String(port) }), dir);
    expect(await svc.exited).toBe(1);
    expect(svc.stdout()).toContain('migrations failed');
    expect(`${svc.stdout()}${svc.stderr()}`).not.toMatch(/Cannot find module|not installed/);
  });
});

const onPostgres = usingPostgres() ? describe : describe.skip;

onPostgres('Waiting for the database at start-up (DB_STARTUP_WAIT_SECONDS)', () => {
  afterAll(() => stopAll());

  test('When the database appears within the wait, then the service migrates and listens once it is there', async () => {
    const fresh = await freshDatabaseEnv();
    // An address nothing answers on yet; after two refused attempts a relay to PostgreSQL opens on it.
    const port = await freePort();
    const svc = spawnService(
      baseEnv({
        ...fresh.env,
        DB_HOSTNAME: '127.0.0.1',
        DB_PORT: String(port),
        DB_STARTUP_WAIT_SECONDS: '30',
      }),
    );
    const retries = await svc.waitForLog(
      /^the database is not reachable yet; retrying the migrations$/,
      20_000,
    );
    expect(retries.attempt).toBe(1);
    while (svc.lines.filter((line) => line.msg === retries.msg).length < 2) {
      expect(svc.child.exitCode).toBeNull();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const relay = new Relay(postgresServer.port);
    await relay.start(port);
    try {
      const listening = await svc.waitForLog(/^listening on http/, 30_000);
      const answer = await fetch(`http://127.0.0.1:${String(listening.port)}/healthz/ready`);
      expect(answer.status).toBe(200);
    } finally {
      await svc.stop();
      await relay.close();
      await fresh.drop();
    }
  });

  test('When the database stays unreachable past the wait, then the process exits 1 after it, having said each retry', async () => {
    const port = await freePort();
    const started = Date.now();
    const svc = spawnService(
      baseEnv({ DB_HOSTNAME: '127.0.0.1', DB_PORT: String(port), DB_STARTUP_WAIT_SECONDS: '2' }),
    );
    expect(await svc.exited).toBe(1);
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(2000);
    expect(elapsed).toBeLessThan(20_000);
    expect(svc.stdout()).toContain('the database is not reachable yet; retrying the migrations');
    expect(svc.stdout()).toContain('migrations failed; not starting');
    expect(svc.stdout()).not.toContain('listening');
  });
});

describe('Migrations at start-up', () => {
  test('When a migration fails, then the process exits non-zero and never listens', async () => {
    // A table already in the way makes the first migration fail.
    let env: Record<string, string>;
    let cleanup: () => Promise<void>;
    if (usingPostgres()) {
      const fresh = await freshDatabaseEnv();
      const db = postgresConnection(fresh.env.DB_NAME);
      await db.raw('CREATE TABLE users (nothing int)');
      await db.destroy();
      env = fresh.env;
      cleanup = () => fresh.drop();
    } else {
      const dir = mkdtempSync(path.join(tmpdir(), 'sp-broken-'));
      const pglite = new PGlite(dir);
      await pglite.exec('CREATE TABLE users (nothing int)');
      await pglite.close();
      env = { DB_EMBEDDED_DIR: dir };
      cleanup = () => {
        rmSync(dir, { recursive: true, force: true });
        return Promise.resolve();
      };
    }
    const svc = spawnService(baseEnv(env));
    const code = await svc.exited;
    await cleanup();
    expect(code).not.toBe(0);
    expect(svc.stdout()).toContain('migrations failed');
    expect(svc.stdout()).not.toContain('listening');
  });
});

describe('Graceful shutdown', () => {
  let fresh: { env: Record<string, string>; drop(): Promise<void> };
  beforeAll(async () => {
    fresh = await freshDatabaseEnv();
  });
  afterAll(async () => {
    await fresh.drop();
  });

  test('When SIGTERM arrives, then ready turns 503 at once while live stays 200, in-flight and new requests are still served during the delay, and the exit code is 0', async () => {
    const svc = await startService(
      baseEnv({ ...fresh.env, SHUTDOWN_DELAY_SECONDS: '2', BCRYPT_ROUNDS: '12' }),
    );
    const port = svc.port;
    const url = (p: string) => `http://127.0.0.1:${port}${p}`;
    const credentials = { email: 'bye@example.com', password: 'password123' };
    const created = await fetch(url('/users/'), {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(credentials),
    });
    expect(created.status).toBe(201);

    // A login is slow on purpose (bcrypt): it is in flight when the signal lands.
    const inFlight = fetch(url('/login'), {
      method: 'POST',
      body: new URLSearchParams({ username: credentials.email, password: credentials.password }),
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    svc.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 200));

    expect((await fetch(url('/healthz/ready'))).status).toBe(503);
    expect((await fetch(url('/healthz/live'))).status).toBe(200);
    expect((await fetch(url('/posts/public'))).status).toBe(200);
    const login = await inFlight;
    expect(login.status).toBe(200);
    expect(((await login.json()) as { token_type: string }).token_type).toBe('bearer');

    expect(await svc.exited).toBe(0);
    expect(svc.stdout()).toContain('shutdown complete');
  });
});
