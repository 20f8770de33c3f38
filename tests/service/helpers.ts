import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import type { Writable } from 'node:stream';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import type { Express } from 'express';
import jwt from 'jsonwebtoken';
import knex, { type Knex } from 'knex';
import request from 'supertest';
import { migrations } from '../../migrations';
import { createApp } from '../../service/src/app';
import { openDatabase, type Database } from '../../service/src/db/connection';
import { migrateToLatest, sourceOf } from '../../service/src/db/migrator';
import { createLogger, type Logger } from '../../service/src/logger';
import { startServer, type RunningServer } from '../../service/src/server';
import { loadSettings, type Settings } from '../../service/src/settings';
import type { Post } from '../../service/src/posts/post';
import type { User } from '../../service/src/users/user';
import { call } from '../../tools/harness/client';
import { serviceEnv, TEST_SECRET } from '../../tools/harness/env';
import { copyTemplate } from '../../tools/harness/pglite-template';
import { adminDatabase, createScratchDatabase, postgresServer, rowsOf } from '../../tools/harness/postgres';
import { problemFaults } from '../../tools/harness/problem';

export { TEST_SECRET } from '../../tools/harness/env';
export { captureLog } from '../../tools/harness/log';

/** Environment for the service under test: PostgreSQL when DB_HOSTNAME is set, else embedded in memory. */
export function testEnv(overrides: Record<string, string> = {}): NodeJS.ProcessEnv {
  // A test that meets an unreachable database wants the failure now; the wait has cases of its own.
  return serviceEnv({ DB_STARTUP_WAIT_SECONDS: '0', ...overrides });
}

export const usingPostgres = (): boolean => Boolean(process.env.DB_HOSTNAME);

/** Cases that need a real PostgreSQL server: skipped on the embedded database. */
export const describeOnPostgres = usingPostgres() ? describe : describe.skip;
export const testOnPostgres = usingPostgres() ? test : test.skip;
/** Cases about the embedded database alone: skipped when the suite runs on PostgreSQL. */
export const describeOnEmbedded = usingPostgres() ? describe.skip : describe;

/** A direct connection to the test PostgreSQL server (DB_* variables), for set-up and clean-up. */
export function postgresConnection(database = adminDatabase) {
  return knex({ client: 'pg', connection: { ...postgresServer, database }, pool: { min: 0, max: 1 } });
}

export { rowsOf } from '../../tools/harness/postgres';

/** The plan PostgreSQL chooses for `sql` on `db`, as EXPLAIN prints it. */
export const planOf = async (db: Knex, sql: string): Promise<string> =>
  (await rowsOf<{ 'QUERY PLAN': string }>(db, `EXPLAIN ${sql}`)).map((r) => r['QUERY PLAN']).join('\n');

/** A direct connection to the database `db` works on, past any relay or pooler in front of it. */
export async function connectionBeside(db: Database): Promise<Knex> {
  const [row] = await rowsOf<{ name: string }>(db.knex, 'SELECT current_database() AS name');
  return postgresConnection(row?.name);
}

/**
 * A fresh, empty database for one test file: its own PostgreSQL database (with LC_CTYPE `ctype`
 * when given), or a new in-memory PGlite.
 */
export async function freshDatabaseEnv(
  options: { ctype?: string } = {},
): Promise<{ env: Record<string, string>; drop(): Promise<void> }> {
  if (!usingPostgres()) return { env: {}, drop: () => Promise.resolve() };
  const database = await createScratchDatabase('sp_test', options);
  return { env: { DB_NAME: database.name }, drop: () => database.drop() };
}

/**
 * A fresh database already migrated to the latest schema, for a file that is not about the
 * migrations: on PostgreSQL a scratch database (migrated by whoever opens it); embedded, a copy of
 * the migrated template the suite's set-up made, so the file pays neither initdb nor migrations.
 */
export async function migratedDatabaseEnv(
  options: { ctype?: string } = {},
): Promise<{ env: Record<string, string>; drop(): Promise<void> }> {
  const copy = usingPostgres() ? undefined : copyTemplate();
  if (!copy) return freshDatabaseEnv(options);
  return {
    env: { DB_EMBEDDED_DIR: copy.dir },
    drop: () => {
      copy.remove();
      return Promise.resolve();
    },
  };
}

/**
 * A fresh, empty database for one case (with LC_CTYPE `ctype` on PostgreSQL), opened with
 * `overrides`; `work` gets those settings too, and `another` opens one more connection to it. All
 * are closed, newest first, and the database dropped after the case.
 */
export async function onFresh(
  overrides: Record<string, string>,
  work: (
    db: Database,
    another: (env?: Record<string, string>) => Promise<Database>,
    settings: Settings,
  ) => Promise<void>,
  database: { ctype?: string } = {},
): Promise<void> {
  const fresh = await freshDatabaseEnv(database);
  const logger = createLogger('silent');
  const opened: Database[] = [];
  const settingsWith = (env: Record<string, string>) => loadSettings(testEnv({ ...fresh.env, ...env }));
  const open = async (settings: Settings) => {
    opened.unshift(await openDatabase(settings, logger));
    return opened[0] as Database;
  };
  try {
    const settings = settingsWith(overrides);
    await work(await open(settings), (env = {}) => open(settingsWith(env)), settings);
  } finally {
    for (const db of opened) await db.close();
    await fresh.drop();
  }
}

/** Migrates `db` to the schema of the first `count` migrations alone, as an older release left it. */
export async function migrateFirst(db: Database, count: number): Promise<void> {
  await db.knex.migrate.latest(sourceOf(Object.keys(migrations).slice(0, count)));
}

export interface MigratedDatabase {
  db: Database;
  /** The database's variables, for the settings of each app or server a file makes on it. */
  env: Record<string, string>;
  settings: Settings;
  logger: Logger;
  /** Closes the database (a case may have closed it already) and drops it. */
  close: () => Promise<void>;
}

/** A fresh database migrated to the latest schema and open, with settings from `overrides`. */
export async function openMigratedDatabase(
  overrides: Record<string, string> = {},
  database: { ctype?: string } = {},
): Promise<MigratedDatabase> {
  const fresh = await migratedDatabaseEnv(database);
  const settings = loadSettings(testEnv({ ...fresh.env, ...overrides }));
  const logger = createLogger(settings.logLevel);
  const db = await openDatabase(settings, logger);
  await migrateToLatest(db, logger);
  return {
    db,
    env: fresh.env,
    settings,
    logger,
    close: async () => {
      try {
        await db.close();
      } finally {
        await fresh.drop();
      }
    },
  };
}

/** `appLog`: the app's log at info goes there (the database's set-up logs as LOG_LEVEL says). */
export interface StartOptions {
  appLog?: Writable;
}

const appLogger = (logger: Logger, { appLog }: StartOptions): Logger =>
  appLog ? createLogger('info', appLog) : logger;

export interface TestService {
  app: Express;
  db: Database;
  settings: Settings;
  logger: Logger;
  close(): Promise<void>;
}

/** The app in-process on a fresh, migrated database; requests go over real HTTP via supertest. */
export async function startTestService(
  overrides: Record<string, string> = {},
  options: { ctype?: string } & StartOptions = {},
): Promise<TestService> {
  const { db, settings, logger, close } = await openMigratedDatabase(overrides, options);
  return {
    app: createApp({ db, settings, logger: appLogger(logger, options) }),
    db,
    settings,
    logger,
    close,
  };
}

/** Stops `server` at once: its open connections are cut, so no client's keep-alive holds it open. */
export async function stopServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

/** terminus traps these for the lifetime of a server; this test process must not keep them. */
export function releaseShutdownSignals(): void {
  process.removeAllListeners('SIGTERM');
  process.removeAllListeners('SIGINT');
}

export interface TestServer {
  running: RunningServer;
  db: Database;
  /** http://127.0.0.1:<port> */
  base: string;
  close: () => Promise<void>;
}

/**
 * The server as it runs in production (startServer: terminus, Node's HTTP layer, the app, the
 * metrics listener) inside this process, on ephemeral ports and a fresh, migrated database.
 */
export async function startTestServer(
  overrides: Record<string, string> = {},
  options: StartOptions = {},
): Promise<TestServer> {
  const database = await openMigratedDatabase({ PORT: '0', ...overrides });
  const running = await startServer(database.settings, database.db, appLogger(database.logger, options));
  return {
    running,
    db: database.db,
    base: `http://127.0.0.1:${running.port}`,
    close: async () => {
      await stopServer(running.server);
      await database.close();
      releaseShutdownSignals();
    },
  };
}

/**
 * What `start` makes, for a describe's or a file's cases: the object is returned at once and filled in
 * before the first case, then `prepare` runs on it; it is closed after the last.
 */
export function fixture<T extends { close(): Promise<void> }>(
  start: () => Promise<T>,
  prepare: (made: T) => Promise<void> = () => Promise.resolve(),
): T {
  const made = {} as T;
  beforeAll(async () => {
    Object.assign(made, await start());
    await prepare(made);
  });
  afterAll(async () => {
    // Only what was started is closed: a failed start has already said why.
    if ('close' in made) await made.close();
  });
  return made;
}

/** startTestServer as a fixture of a describe's or a file's cases. */
export const serverFixture = (
  overrides: Record<string, string> = {},
  options: StartOptions = {},
): TestServer => fixture(() => startTestServer(overrides, options));

let emailCounter = 0;
/**
 * Waits for the next whole second. A token's exp is in whole seconds: one signed late in a second
 * with a lifetime of n seconds lives only n - 1 and a bit, which a slow request can miss.
 */
export const nextWholeSecond = (): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000)));

export const uniqueEmail = (prefix = 'user'): string =>
  `${prefix}${++emailCounter}.${process.pid}@example.com`;

/** Letters and digits no other title holds, so a search finds exactly the posts a test made. */
export const uniqueToken = (prefix = 't'): string => `${prefix}${randomBytes(6).toString('hex')}`;

/**
 * A token jsonwebtoken signs: HS256 with TEST_SECRET, living ten minutes, unless `options` name
 * another key, algorithm or lifetime; the claims are the ones given, and jsonwebtoken adds iat.
 */
export function signToken(
  claims: Record<string, unknown>,
  { key = TEST_SECRET, ...options }: jwt.SignOptions & { key?: string } = {},
): string {
  // Claims that carry their own exp take no lifetime: jsonwebtoken refuses a token given both.
  const lifetime = 'exp' in claims ? {} : { expiresIn: 600 };
  return jwt.sign(claims, key, { algorithm: 'HS256', ...lifetime, ...options });
}

export interface Account {
  user: User;
  token: string;
  email: string;
  password: string;
}

/** Where supertest sends a request: an app it serves itself, or a listening server's base URL. */
export type Target = Express | string;

/** Logs in through the API's form, which must answer 200; returns the access token. */
export async function logIn(app: Target, username: string, password: string): Promise<string> {
  const login = await request(app).post('/login').type('form').send({ username, password }).expect(200);
  return (login.body as { access_token: string }).access_token;
}

/** Registers and logs in a new user through the API, as a client would. */
export async function newAccount(app: Target, email = uniqueEmail()): Promise<Account> {
  const password = 'correct horse battery';
  const created = await request(app).post('/users/').send({ email, password }).expect(201);
  return { user: created.body as User, token: await logIn(app, email, password), email, password };
}

/**
 * A file's app on a fresh, migrated database and the named accounts, registered and logged in
 * through the API (each e-mail begins with its name). The objects are returned at once and filled
 * in before the file's first case, so a table may name them; the database goes after the last case.
 */
export function postsFixture<Name extends string = never>(
  accounts: readonly Name[] = [],
  settings: Record<string, string> = {},
  options: { ctype?: string } & StartOptions = {},
): { service: TestService } & Record<Name, Account> {
  const made = Object.fromEntries(accounts.map((name) => [name, {} as Account])) as Record<Name, Account>;
  const service = fixture(
    () => startTestService(settings, options),
    async ({ app }) => {
      for (const name of accounts) Object.assign(made[name], await newAccount(app, uniqueEmail(name)));
    },
  );
  return { service, ...made };
}

/**
 * What is wrong with an answer's body against the component /openapi.json documents it as (none:
 * it is what the document says), read by ajv; OpenAPI 3.0's `example` is an annotation only.
 */
export async function documentedAs(app: Target, component: string): Promise<(body: unknown) => string[]> {
  const { components } = (await request(app).get('/openapi.json').expect(200)).body as { components: object };
  const ajv = new Ajv({ allErrors: true });
  addFormats(ajv);
  ajv.addKeyword('example').addKeyword('components');
  ajv.addSchema({ components }, 'openapi.json');
  const validate = ajv.getSchema(`openapi.json#/components/schemas/${component}`);
  if (!validate) throw new Error(`/openapi.json has no component ${component}`);
  return (body) =>
    validate(body) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? e.keyword}`);
}

export const bearer = (account: Account | string): { Authorization: string } => ({
  Authorization: `Bearer ${typeof account === 'string' ? account : account.token}`,
});

/** `account`'s vote on a post, as a client casts it: dir 1 adds it, 0 withdraws it. */
export const vote = (app: Target, account: Account, postId: number, dir: number): request.Test =>
  request(app).post('/votes/').set(bearer(account)).send({ post_id: postId, dir });

type PostFields = Partial<{ title: string; content: string; published: boolean }>;

export async function newPost(app: Target, account: Account, fields: PostFields = {}): Promise<Post> {
  const res = await request(app)
    .post('/posts/')
    .set(bearer(account))
    .send({ title: 'A title', content: 'Some content', ...fields })
    .expect(201);
  return res.body as Post;
}

/** A new post by `account` on a listening server, through the harness's client, and its ETag as they read it. */
export async function newTaggedPost(
  base: string,
  account: Account,
  fields: { title: string; content: string },
): Promise<{ id: number; etag: string }> {
  const created = await call(base, '/posts/', { token: account.token, json: fields });
  expect(created.status).toBe(201);
  const { id } = created.body as { id: number };
  return { id, etag: (await call(base, `/posts/${id}`, { token: account.token })).headers.get('etag') ?? '' };
}

/** `count` posts by `account`, made one after another with the fields `fieldsOf(i)`; their ids, oldest first. */
export async function newPosts(
  app: Target,
  account: Account,
  count: number,
  fieldsOf: (i: number) => PostFields,
): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < count; i += 1) ids.push((await newPost(app, account, fieldsOf(i))).id);
  return ids;
}

/** A post as an answer carries it: its times are ISO strings in JSON. */
export interface PostBody {
  id: number;
  title: string;
  content: string;
  published: boolean;
  created_at: string;
  user_id: number;
  owner: { id: number; email: string; created_at: string };
  votes: number;
}

/** The rows a request could change (users, posts, votes), to show that a refused one changed nothing. */
export async function databaseSnapshot(db: Database): Promise<string> {
  const [users, posts, votes] = await Promise.all([
    db.knex('users').orderBy('id').select('id', 'email'),
    db.knex('posts').orderBy('id').select('id', 'title', 'content', 'published'),
    db.knex('votes').orderBy(['post_id', 'user_id']).select('post_id', 'user_id'),
  ]);
  return JSON.stringify({ users, posts, votes });
}

/** Asserts the problem+json shape every error shares and returns its body. */
export function expectProblem(
  res: request.Response,
  status: number,
): { detail: string; errors?: { field: string; message: string }[] } {
  expect(res.status).toBe(status);
  expect(problemFaults({ status, contentType: res.headers['content-type'], body: res.body })).toEqual([]);
  return res.body as { detail: string };
}
