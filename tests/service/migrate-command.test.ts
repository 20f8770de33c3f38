/**
 * The operators' migration command as they run it (`node dist/service/src/migrate.js`, here through
 * tsx): `status`, and `down --to`, which undoes what an earlier release does not know and refuses
 * anything it cannot do whole.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { openDatabase } from '../../service/src/db/connection';
import { appliedMigrations, knownMigrations } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import { loadSettings } from '../../service/src/settings';
import { countOf } from '../../tools/harness/postgres';
import { migratedDatabaseEnv, testEnv } from './helpers';

const root = path.join(__dirname, '..', '..');
const tsx = path.join(root, 'node_modules', '.bin', 'tsx');

jest.setTimeout(120_000);

let env: Record<string, string>;
let drop: () => Promise<void>;

beforeAll(async () => {
  const database = await migratedDatabaseEnv();
  env = database.env;
  drop = () => database.drop();
  // On PostgreSQL a scratch database, which the command migrates as the service's start would.
  expect(await migrate('latest')).toMatchObject({ code: 0 });
});
afterAll(() => drop());

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function migrate(...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await promisify(execFile)(tsx, ['service/src/migrate.ts', ...args], {
      cwd: root,
      env: { ...testEnv(env), LOG_LEVEL: 'warn' },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

/** Runs `use` on the database the command works on, closed after (the embedded one has one user at a time). */
async function withDatabase<T>(
  use: (db: Awaited<ReturnType<typeof openDatabase>>) => Promise<T>,
): Promise<T> {
  const db = await openDatabase(loadSettings(testEnv(env)), createLogger('silent'));
  try {
    return await use(db);
  } finally {
    await db.close();
  }
}

const recorded = () => withDatabase((db) => appliedMigrations(db.knex));

const known = knownMigrations();
const statusLines = (names: string[], state: string) => names.map((name) => `${state}  ${name}`);

test('When an operator runs migrate down --to a migration, then every migration after it is undone, the rows stay, status shows them pending, and latest applies them again', async () => {
  expect((await migrate('status')).stdout.trim().split('\n')).toEqual(statusLines(known, 'applied'));
  await withDatabase(async (db) => {
    await db.knex('users').insert({ email: 'kept@example.com', password: 'x'.repeat(60) });
  });

  const keep = known[known.length - 4] ?? '';
  // By its number, as an operator copies it from the release notes.
  const down = await migrate('down', '--to', keep.split('_')[0] ?? '');
  expect(down).toMatchObject({ code: 0, stderr: '' });
  expect(await recorded()).toEqual(known.slice(0, -3));
  expect((await migrate('status')).stdout.trim().split('\n')).toEqual([
    ...statusLines(known.slice(0, -3), 'applied'),
    ...statusLines(known.slice(-3), 'pending'),
  ]);
  const kept = await withDatabase((db) => countOf(db.knex, 'users WHERE email = ?', ['kept@example.com']));
  expect(kept).toBe(1);

  expect(await migrate('latest')).toMatchObject({ code: 0 });
  expect(await recorded()).toEqual(known);
});

test.each([
  ['without --to', ['down'], /down needs --to <migration>/],
  [
    'to a migration this build does not know',
    ['down', '--to', '20991231000001'],
    /unknown migration "20991231000001"/,
  ],
  ['with an unknown command', ['sideways'], /unknown command "sideways"/],
])(
  'When an operator runs migrate %s, then it says what is wrong and undoes nothing',
  async (_case, args, message) => {
    const outcome = await migrate(...args);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(message);
    expect(await recorded()).toEqual(known);
  },
);

test('When a newer release applied a migration this build does not know, then down --to refuses, naming it, and undoes nothing; status shows it', async () => {
  const newer = '29990101000001_from_a_newer_release';
  await withDatabase((db) =>
    db.knex('knex_migrations').insert({ name: newer, batch: 99, migration_time: new Date() }),
  );
  try {
    const outcome = await migrate('down', '--to', known[0] ?? '');
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(`${newer} was applied by a newer release`);
    expect(await recorded()).toEqual([...known, newer]);
    expect((await migrate('status')).stdout).toContain(
      `applied  ${newer}  (not in this build: a newer release's)`,
    );
  } finally {
    await withDatabase((db) => db.knex('knex_migrations').where({ name: newer }).delete());
  }
});

test('When down --to names a migration that is not applied, then it refuses and undoes nothing', async () => {
  const keep = known[known.length - 2] ?? '';
  expect(await migrate('down', '--to', keep)).toMatchObject({ code: 0 });
  try {
    const outcome = await migrate('down', '--to', known.at(-1) ?? '');
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).toMatch(`${known.at(-1) ?? ''} is not applied`);
    expect(await recorded()).toEqual(known.slice(0, -1));
  } finally {
    await migrate('latest');
  }
});
