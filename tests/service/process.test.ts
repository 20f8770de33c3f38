import { createServer, type AddressInfo } from 'node:net';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { call, sleep } from '../../tools/harness/client';
import { postgresServer } from '../../tools/harness/postgres';
import { Relay } from '../../tools/harness/relay';
import { freePort, ROOT, spawnScript, startService, stopAll } from '../../tools/harness/service';
import { loadSettings } from '../../service/src/settings';
import {
  describeOnEmbedded,
  describeOnPostgres,
  freshDatabaseEnv,
  migratedDatabaseEnv,
  postgresConnection,
  TEST_SECRET,
  testEnv,
  usingPostgres,
} from './helpers';

const baseEnv = (overrides: Record<string, string>) =>
  testEnv({ LOG_LEVEL: 'info', PORT: '0', ...overrides });
const spawnService = (env: NodeJS.ProcessEnv, cwd = ROOT) => spawnScript('service/src/main.ts', env, { cwd });
/** The messages of the process's fatal (level 60) lines. */
const fatalLines = (svc: ReturnType<typeof spawnService>) => svc.lines.filter((line) => line.level === 60);
const fatalMessages = (svc: ReturnType<typeof spawnService>) => fatalLines(svc).map((line) => line.msg);

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
    ['DB_STATEMENT_TIMEOUT_MS', { DB_STATEMENT_TIMEOUT_MS: '199' }],
    ['DB_MIGRATION_TIMEOUT_MS', { DB_MIGRATION_TIMEOUT_MS: '10' }],
    ['DB_STARTUP_WAIT_SECONDS', { DB_STARTUP_WAIT_SECONDS: 'forever' }],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }],
    ['OTEL_TRACES_SAMPLER', { OTEL_TRACES_SAMPLER: 'sometimes' }],
    ['OTEL_TRACES_SAMPLER_ARG', { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '10' }],
    ['OTEL_RESOURCE_ATTRIBUTES', { OTEL_RESOURCE_ATTRIBUTES: 'k8s.pod.name' }],
    ['OTEL_BSP_SCHEDULE_DELAY', { OTEL_BSP_SCHEDULE_DELAY: '0' }],
  ])('When %s has a bad value, then the start stops with one line naming it', async (name, overrides) => {
    const svc = spawnService(baseEnv(overrides));
    expect(await svc.exited).toBe(1);
    const lines = svc.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^Invalid setting ${name}: `));
    expect(svc.stdout()).not.toContain('listening');
  });
});

/** Runs `work` while another listener holds a port. */
async function withPortTaken(work: (port: number) => Promise<void>): Promise<void> {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, resolve));
  try {
    await work((taken.address() as AddressInfo).port);
  } finally {
    await new Promise((resolve) => taken.close(resolve));
  }
}

describe('Start-up failures say, in one line, which setting to change', () => {
  test('When NODE_ENV=production and SECRET_KEY is unset, then the line says production requires it', async () => {
    const svc = spawnService(baseEnv({ NODE_ENV: 'production', SECRET_KEY: '' }));
    expect(await svc.exited).toBe(1);
    expect(svc.stderr().trim()).toBe(
      'Invalid setting SECRET_KEY: SECRET_KEY is required when NODE_ENV=production (tokens must outlive the process): set one, e.g. `openssl rand -hex 32`',
    );
  });

  test.each([
    ['PORT', 'PORT'],
    ['METRICS_PORT', 'METRICS_PORT'],
  ])('When %s is in use, then the process exits 1 at once, before any migration, naming it', async (name) => {
    await withPortTaken(async (port) => {
      const svc = spawnService(baseEnv({ PORT: '0', METRICS_PORT: '0', [name]: String(port) }));
      expect(await svc.exited).toBe(1);
      const fatal = fatalLines(svc);
      expect(fatal.map((line) => line.msg)).toEqual([
        `${name}=${String(port)} is in use, perhaps by another instance of this service: stop it, or set ${name} to a free port; not starting`,
      ]);
      expect(fatal[0]).not.toHaveProperty('err');
      // Nothing came between the settings and the failure: no database opened, no migration.
      expect(svc.lines.map((line) => line.msg)).toEqual(['starting', fatal[0]?.msg]);
    });
  });

  test('When LOG_LEVEL=debug, then the failure line carries the error and its stack', async () => {
    await withPortTaken(async (port) => {
      const svc = spawnService(baseEnv({ LOG_LEVEL: 'debug', PORT: String(port), METRICS_PORT: '0' }));
      expect(await svc.exited).toBe(1);
      const [fatal] = fatalLines(svc);
      expect((fatal?.err as { stack?: string } | undefined)?.stack).toMatch(/EADDRINUSE/);
    });
  });

  test('When the server asks for a password and DB_PASSWORD is unset, then the line names DB_PASSWORD', async () => {
    // SCRAM-SHA-256 as PostgreSQL asks it: AuthenticationSASL, then SASLContinue, which needs the password.
    const authentication = (kind: number, data: string): Buffer => {
      const body = Buffer.from(data, 'latin1');
      const head = Buffer.alloc(9);
      head.write('R', 0, 'latin1');
      head.writeInt32BE(8 + body.length, 1);
      head.writeInt32BE(kind, 5);
      return Buffer.concat([head, body]);
    };
    const server = createServer((socket) => {
      socket.on('error', () => undefined);
      const replies = [
        authentication(10, 'SCRAM-SHA-256\0\0'),
        authentication(11, 'r=nonce,s=c2FsdA==,i=4096'),
      ];
      socket.on('data', () => {
        const reply = replies.shift();
        if (reply) socket.write(reply);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const env = baseEnv({ DB_HOSTNAME: '127.0.0.1', DB_PORT: String(port), DB_USERNAME: 'someone' });
      delete env.DB_PASSWORD;
      const svc = spawnService(env);
      expect(await svc.exited).toBe(1);
      expect(fatalMessages(svc)).toEqual([
        `DB_PASSWORD is not set, and the PostgreSQL server at DB_HOSTNAME=127.0.0.1 DB_PORT=${String(port)} asks for a password: set DB_PASSWORD (and DB_USERNAME); not starting`,
      ]);
      expect(`${svc.stdout()}${svc.stderr()}`).not.toMatch(/SASL|migrations failed|\n\s+at /);
    } finally {
      server.close();
    }
  });
});

describe('SHUTDOWN_DELAY_SECONDS', () => {
  test('When NODE_ENV is not production, then the delay is 0 unless set; in production it is 5', () => {
    const delay = (env: Record<string, string>) => loadSettings(baseEnv(env)).shutdownDelaySeconds;
    expect(delay({ NODE_ENV: 'development' })).toBe(0);
    expect(delay({ NODE_ENV: 'test' })).toBe(0);
    expect(delay({ NODE_ENV: 'production', BCRYPT_ROUNDS: '10' })).toBe(5);
    expect(delay({ NODE_ENV: 'development', SHUTDOWN_DELAY_SECONDS: '3' })).toBe(3);
  });
});

describe('Without the optional dependencies (the production image: npm ci --omit=optional)', () => {
  let dir: string;
  beforeAll(() => {
    // The sources beside links to every installed package but the embedded database's, as that install has.
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
    expect(svc.stdout()).toContain(`DB_PORT=${String(port)} could not be reached`);
    expect(`${svc.stdout()}${svc.stderr()}`).not.toMatch(/Cannot find module|not installed/);
  });
});

describeOnPostgres('Waiting for the database at start-up (DB_STARTUP_WAIT_SECONDS)', () => {
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
      /^the database is not reachable yet; retrying for \d+ s more \(DB_STARTUP_WAIT_SECONDS\)$/,
      20_000,
    );
    expect(retries.attempt).toBe(1);
    const retry = /^the database is not reachable yet; retrying for /;
    while (svc.lines.filter((line) => retry.test(line.msg ?? '')).length < 2) {
      expect(svc.child.exitCode).toBeNull();
      await sleep(100);
    }
    const relay = new Relay(postgresServer.port, postgresServer.host);
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

  test('When DB_NAME does not exist, then the line names it and says how to create it', async () => {
    const svc = spawnService(baseEnv({ DB_NAME: 'sp_never_created' }));
    expect(await svc.exited).toBe(1);
    expect(fatalMessages(svc)).toEqual([
      expect.stringMatching(
        /^DB_NAME=sp_never_created does not exist on the PostgreSQL server at .*: create it \(createdb sp_never_created\), or set DB_NAME to one that exists; not starting$/,
      ),
    ]);
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
    expect(svc.stdout()).toContain('the database is not reachable yet; retrying for ');
    const fatal = fatalLines(svc);
    expect(fatal.map((line) => line.msg)).toEqual([
      `the PostgreSQL server at DB_HOSTNAME=127.0.0.1 DB_PORT=${String(port)} could not be reached after retrying for DB_STARTUP_WAIT_SECONDS=2 (connect ECONNREFUSED 127.0.0.1:${String(port)}): check that it runs and that DB_HOSTNAME and DB_PORT name it, or raise DB_STARTUP_WAIT_SECONDS; not starting`,
    ]);
    // No migration ran, so none is said to have failed; and no stack below the info level.
    expect(svc.stdout()).not.toContain('migrations failed');
    expect(fatal[0]).not.toHaveProperty('err');
    expect(svc.stdout()).not.toContain('listening');
  });
});

describeOnPostgres("The server's durability settings", () => {
  // Either would have the service acknowledge a change the database can lose.
  test.each([
    [
      'client_min_messages',
      'error',
      "which hides the warning PostgreSQL sends when a commit's wait for a synchronous standby is cut short, so such a change would be acknowledged: set it to warning or below",
    ],
    [
      'synchronous_commit',
      'off',
      "which acknowledges a commit before the primary's disk has it, so a crash would lose an acknowledged change: set it to on (or remote_write, remote_apply)",
    ],
  ])(
    'When %s is %s for the database, then the start stops with one line naming the setting and how to reset it',
    async (name, value, why) => {
      const fresh = await freshDatabaseEnv();
      const database = String(fresh.env.DB_NAME);
      const admin = postgresConnection();
      try {
        await admin.raw(`ALTER DATABASE ?? SET ${name} = ${value}`, [database]);
      } finally {
        await admin.destroy();
      }
      const svc = spawnService(baseEnv(fresh.env));
      // Started, it would serve until stopped: the wait ends either way.
      const code = await Promise.race([svc.exited, sleep(20_000).then(() => 'still running')]);
      await svc.stop();
      await fresh.drop();
      expect(code).toBe(1);
      expect(fatalMessages(svc)).toEqual([
        `${name} is ${value} for DB_USERNAME=postgres on DB_NAME=${database}, ${why} (ALTER DATABASE "${database}" RESET ${name}); not starting`,
      ]);
      expect(svc.stdout()).not.toContain('listening');
    },
  );
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
      // The suite's migrated copy, or a new database when this run made none: either has a users table.
      const copy = await migratedDatabaseEnv();
      const dir = copy.env.DB_EMBEDDED_DIR ?? mkdtempSync(path.join(tmpdir(), 'sp-broken-'));
      // pg_trgm is not loaded: nothing here calls it.
      const pglite = new PGlite(dir);
      await pglite.exec(
        copy.env.DB_EMBEDDED_DIR
          ? "DELETE FROM knex_migrations WHERE name LIKE '%create_users'"
          : 'CREATE TABLE users (nothing int)',
      );
      await pglite.close();
      env = { DB_EMBEDDED_DIR: dir };
      cleanup = async () => {
        await copy.drop();
        rmSync(dir, { recursive: true, force: true });
      };
    }
    const svc = spawnService(baseEnv(env));
    const code = await svc.exited;
    await cleanup();
    expect(code).not.toBe(0);
    expect(fatalMessages(svc)).toEqual([
      expect.stringMatching(/^migrations failed: .*"users" already exists.*; not starting$/),
    ]);
    expect(svc.stdout()).not.toContain('listening');
  });
});

describeOnEmbedded('One process per embedded database folder', () => {
  test('When a second process opens the folder one holds, then it exits 1 naming DB_EMBEDDED_DIR and the holder, and no acknowledged write is lost; once the holder is gone, killed or stopped, the folder opens again', async () => {
    const copy = await migratedDatabaseEnv();
    try {
      const dir = copy.env.DB_EMBEDDED_DIR ?? '';
      const first = await startService(baseEnv(copy.env));
      const account = { email: 'held@example.com', password: 'password123' };
      expect((await call(first.base, '/users/', { json: account })).status).toBe(201);

      const inUse = `DB_EMBEDDED_DIR=${dir} is in use by process ${String(first.pid)} (another npm start, npm run dev or npm run migrate on the same folder): stop it, or set DB_EMBEDDED_DIR to another folder (if it is none of these, a process that reused the id of one gone, remove ${path.join(realpathSync(dir), 'social-posts.lock')})`;
      const second = spawnService(baseEnv({ ...copy.env, METRICS_PORT: '0' }));
      expect(await second.exited).toBe(1);
      expect(second.stderr().trim()).toBe(`start-up failed: ${inUse}`);
      // The same folder by another name (a symlink) is the same folder.
      const link = `${dir}-link`;
      symlinkSync(dir, link);
      const migrate = spawnScript('service/src/migrate.ts', baseEnv({ DB_EMBEDDED_DIR: link }), {
        args: ['status'],
      });
      expect(await migrate.exited).toBe(1);
      expect(migrate.stderr().trim()).toBe(inUse.replace(`=${dir} `, `=${link} `));
      // The refused opener wrote nothing: the holder still answers for the account it stored.
      const logIn = { form: { username: account.email, password: account.password } };
      expect((await call(first.base, '/login', logIn)).status).toBe(200);

      // Killed, it cannot give the folder back: the next start takes over what it left.
      await first.stop('SIGKILL');
      const third = await startService(baseEnv(copy.env));
      expect((await call(third.base, '/login', logIn)).status).toBe(200);
      // Stopped, it gives the folder back: nothing is left for the next start to judge.
      third.child.kill('SIGTERM');
      expect(await third.exited).toBe(0);
      expect(existsSync(path.join(dir, 'social-posts.lock'))).toBe(false);
    } finally {
      await stopAll();
      rmSync(`${copy.env.DB_EMBEDDED_DIR ?? ''}-link`, { force: true });
      await copy.drop();
    }
  }, 90_000);
});

describeOnEmbedded('One process per embedded database folder, when several start at once', () => {
  /** Openers that load everything first, then all open `dir` at `at` (epoch ms), and say which held it. */
  async function openTogether(dir: string, count: number): Promise<string[]> {
    const script = path.join(dir, '..', `opener-${path.basename(dir)}.ts`);
    writeFileSync(
      script,
      [
        `import { openPGlite } from ${JSON.stringify(path.join(ROOT, 'service/src/db/embedded'))};`,
        // Loaded before the instant, as the service loads it before it opens: the opens meet.
        `require(${JSON.stringify(require.resolve('@electric-sql/pglite'))});`,
        `const at = Number(process.env.AT);`,
        `while (Date.now() < at);`,
        `openPGlite(${JSON.stringify(dir)}, 2000, () => undefined, () => process.exit(1)).then(`,
        `  async ({ close }) => { process.stdout.write('held'); await new Promise((r) => setTimeout(r, 1500)); await close(); },`,
        `  (error: Error) => { process.stdout.write(error.name); },`,
        `);`,
      ].join('\n'),
    );
    const at = String(Date.now() + 4000);
    const openers = Array.from({ length: count }, () =>
      spawnScript(script, { ...process.env, AT: at }, { cwd: ROOT }),
    );
    await Promise.all(openers.map((opener) => opener.exited));
    return openers.map((opener) => opener.stdout()).sort();
  }

  test.each([
    ['no lock is there', undefined],
    ['a killed process left its lock', '2147483646\n'],
  ])(
    'When four processes open one folder in the same instant and %s, then exactly one holds it and the others are refused',
    async (_case, leftover) => {
      const parent = mkdtempSync(path.join(tmpdir(), 'sp-together-'));
      try {
        const dir = path.join(parent, 'db');
        mkdirSync(dir);
        if (leftover) writeFileSync(path.join(dir, 'social-posts.lock'), leftover);
        expect(await openTogether(dir, 4)).toEqual([
          'EmbeddedInUseError',
          'EmbeddedInUseError',
          'EmbeddedInUseError',
          'held',
        ]);
      } finally {
        rmSync(parent, { recursive: true, force: true });
      }
    },
    90_000,
  );
});

describe('Graceful shutdown', () => {
  let fresh: { env: Record<string, string>; drop(): Promise<void> };
  beforeAll(async () => {
    fresh = await migratedDatabaseEnv();
  });
  afterAll(async () => {
    await fresh.drop();
  });

  test('When SIGTERM arrives, then ready turns 503 at once while live stays 200, in-flight and new requests are still served during the delay, and the exit code is 0', async () => {
    const svc = await startService(
      baseEnv({ ...fresh.env, SHUTDOWN_DELAY_SECONDS: '2', BCRYPT_ROUNDS: '12' }),
    );
    const credentials = { email: 'bye@example.com', password: 'password123' };
    expect((await call(svc.base, '/users/', { json: credentials })).status).toBe(201);

    // A login is slow on purpose (bcrypt): it is in flight when the signal lands.
    const inFlight = call(svc.base, '/login', {
      form: { username: credentials.email, password: credentials.password },
    });
    await sleep(20);
    svc.child.kill('SIGTERM');
    await sleep(200);

    expect((await call(svc.base, '/healthz/ready')).status).toBe(503);
    expect((await call(svc.base, '/healthz/live')).status).toBe(200);
    expect((await call(svc.base, '/posts/public')).status).toBe(200);
    const login = await inFlight;
    expect(login.status).toBe(200);
    expect((login.body as { token_type: string }).token_type).toBe('bearer');

    expect(await svc.exited).toBe(0);
    expect(svc.stdout()).toContain('shutdown complete');
  });
});
