import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { Knex } from 'knex';
import { migrations } from '../../migrations';
import * as postVoteCounts from '../../migrations/20261125000005_post_vote_counts';
import { openDatabase, type Database } from '../src/db/connection';
import { migrateDown, migrateToLatest } from '../src/db/migrator';
import { createLogger } from '../src/logger';
import { loadSettings } from '../src/settings';
import { freshDatabaseEnv, testEnv, usingPostgres } from './helpers';

const logger = createLogger('silent');
const open = (env: Record<string, string>) => openDatabase(loadSettings(testEnv(env)), logger);

async function tables(db: Database): Promise<string[]> {
  const result = await db.knex.raw<{ rows: { tablename: string }[] }>(
    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
  );
  return result.rows.map((r) => r.tablename);
}

async function indexes(db: Database): Promise<string[]> {
  const result = await db.knex.raw<{ rows: { indexname: string }[] }>(
    "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname",
  );
  return result.rows.map((r) => r.indexname);
}

const SCHEMA_TABLES = ['knex_migrations', 'knex_migrations_lock', 'posts', 'users', 'votes'];

async function sequences(db: Database): Promise<string[]> {
  const result = await db.knex.raw<{ rows: { relname: string }[] }>(
    "SELECT relname FROM pg_class WHERE relkind = 'S' ORDER BY relname",
  );
  return result.rows.map((r) => r.relname);
}

// The race is over in milliseconds and lost only now and then, so it is run several times.
const RACE_ROUNDS = 8;

(usingPostgres() ? test : test.skip)(
  'When three replicas migrate an empty database at once, then all succeed, each migration ran once and the schema is the one a single replica builds',
  async () => {
    for (let round = 0; round < RACE_ROUNDS; round++) {
      const fresh = await freshDatabaseEnv();
      const replicas = await Promise.all([open(fresh.env), open(fresh.env), open(fresh.env)]);
      try {
        const applied = await Promise.all(replicas.map((db) => migrateToLatest(db, logger)));
        // Exactly one replica applied every migration; the others found them done.
        expect(applied.map((a) => a.length).sort()).toEqual([0, 0, Object.keys(migrations).length]);
        const [first] = replicas;
        const runs = await first.knex<{ name: string }>('knex_migrations').select('name');
        expect(runs.map((r) => r.name).sort()).toEqual(applied.flat().sort());
        expect(await tables(first)).toEqual(SCHEMA_TABLES);
        // One lock row, free: a second row would leave knex's lock taken for good.
        expect(await first.knex('knex_migrations_lock').select('is_locked')).toEqual([{ is_locked: 0 }]);
        // Names a lone replica would give: a racing CREATE TABLE would have picked "..._seq1".
        expect(await sequences(first)).toEqual([
          'knex_migrations_id_seq',
          'knex_migrations_lock_index_seq',
          'posts_id_seq',
          'users_id_seq',
        ]);
      } finally {
        await Promise.all(replicas.map((db) => db.close()));
        await fresh.drop();
      }
    }
  },
);

test('When migrated, then the schema has the indexes the queries rely on', async () => {
  const fresh = await freshDatabaseEnv();
  const db = await open(fresh.env);
  try {
    await migrateToLatest(db, logger);
    expect(await indexes(db)).toEqual(
      expect.arrayContaining([
        'users_email_lower_unique',
        'posts_newest',
        'posts_published_newest',
        'posts_title_trgm',
        'posts_user_id',
        'votes_pkey',
        'votes_post_id',
      ]),
    );
    // The search uses the trigram index on any size of table.
    await db.knex.raw('SET enable_seqscan = off');
    const plan = await db.knex.raw<{ rows: { 'QUERY PLAN': string }[] }>(
      "EXPLAIN SELECT id FROM posts WHERE title ILIKE '%needle%'",
    );
    expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('posts_title_trgm');
  } finally {
    await db.close();
    await fresh.drop();
  }
});

test("When the vote-count migration meets votes cast before it, then each post's count is its number of votes, and later votes, withdrawals and deletions keep it", async () => {
  const fresh = await freshDatabaseEnv();
  const db = await open(fresh.env);
  const k = db.knex;
  try {
    await migrateToLatest(db, logger);
    // The database as the previous release left it: no count, no trigger.
    await postVoteCounts.down(k);
    const [one, two, three] = await k('users')
      .insert([1, 2, 3].map((n) => ({ email: `voter${String(n)}@example.com`, password: 'x' })))
      .returning<{ id: number }[]>('id');
    const [a, b] = await k('posts')
      .insert(['a', 'b'].map((title) => ({ title, content: 'c', published: true, user_id: one?.id })))
      .returning<{ id: number }[]>('id');
    await k('votes').insert([
      { user_id: one?.id, post_id: a?.id },
      { user_id: two?.id, post_id: a?.id },
      { user_id: three?.id, post_id: a?.id },
      { user_id: one?.id, post_id: b?.id },
    ]);
    await postVoteCounts.up(k);
    const counts = async () =>
      Object.fromEntries(
        (await k('posts').select('id', 'vote_count').orderBy('id')).map(
          (r: { id: number; vote_count: number }) => [r.id, r.vote_count],
        ),
      );
    expect(await counts()).toEqual({ [String(a?.id)]: 3, [String(b?.id)]: 1 });
    await k('votes').insert({ user_id: two?.id, post_id: b?.id });
    await k('votes').where({ user_id: one?.id, post_id: a?.id }).delete();
    expect(await counts()).toEqual({ [String(a?.id)]: 2, [String(b?.id)]: 2 });
    // A user's removal takes their votes (the cascade fires the trigger); a post's takes its own.
    await k('users').where({ id: two?.id }).delete();
    expect(await counts()).toEqual({ [String(a?.id)]: 1, [String(b?.id)]: 1 });
    await k('posts').where({ id: b?.id }).delete();
    expect(await counts()).toEqual({ [String(a?.id)]: 1 });
  } finally {
    await db.close();
    await fresh.drop();
  }
});

test('When migrations are rolled back and applied again, then the schema comes back whole', async () => {
  const fresh = await freshDatabaseEnv();
  const db = await open(fresh.env);
  try {
    await migrateToLatest(db, logger);
    const undone = await migrateDown(db, logger);
    expect(undone).toHaveLength(Object.keys(migrations).length);
    expect(await tables(db)).toEqual(['knex_migrations', 'knex_migrations_lock']);
    expect(await migrateToLatest(db, logger)).toHaveLength(Object.keys(migrations).length);
    expect(await tables(db)).toEqual(SCHEMA_TABLES);
  } finally {
    await db.close();
    await fresh.drop();
  }
});

test('When addresses stored before the e-mail policy are migrated, then they take the normalised form, unless another account already has it', async () => {
  const fresh = await freshDatabaseEnv();
  const db = await open(fresh.env);
  try {
    // The schema as it was before the policy: the first three migrations only.
    const names = Object.keys(migrations).slice(0, 3);
    await db.knex.migrate.latest({
      migrationSource: {
        getMigrations: () => Promise.resolve(names),
        getMigrationName: (name: string) => name,
        getMigration: (name: string) => Promise.resolve(migrations[name] as Knex.Migration),
      },
    });
    const rows = [
      'ａｄａ@example.com', // full-width: becomes ada@example.com
      'bob@XN--BCHER-KVA.example', // punycode domain: becomes bob@bücher.example
      'carol@example.com',
      'ｃａｒｏｌ@example.com', // a second account for carol's mailbox: left as stored
      'plain@example.com',
    ];
    for (const email of rows) await db.knex('users').insert({ email, password: 'x' });
    await migrateToLatest(db, logger);
    const stored = await db.knex<{ email: string }>('users').orderBy('id').pluck('email');
    expect(stored).toEqual([
      'ada@example.com',
      'bob@bücher.example',
      'carol@example.com',
      'ｃａｒｏｌ@example.com',
      'plain@example.com',
    ]);
  } finally {
    await db.close();
    await fresh.drop();
  }
});

test('When the migrations folder is read, then migrations/index.ts lists every migration file in it, and nothing else', () => {
  const folder = path.join(__dirname, '..', '..', 'migrations');
  const files = readdirSync(folder)
    .filter((file) => file !== 'index.ts' && /\.[cm]?[jt]s$/.test(file))
    .map((file) => file.replace(/\.[cm]?[jt]s$/, ''));
  expect(Object.keys(migrations).sort()).toEqual(files.sort());
});
