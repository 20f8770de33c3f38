import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { Knex } from 'knex';
import { migrations, type Migration } from '../../migrations';
import * as postVoteCounts from '../../migrations/20261125000005_post_vote_counts';
import * as backfillProgress from '../../migrations/20261126000006_backfills';
import {
  createIndexConcurrently,
  dropIndexConcurrently,
  indexState,
} from '../../service/src/db/concurrent-index';
import { BACKFILL_BATCH_IDS, backfillState, startBackfills } from '../../service/src/db/backfill';
import type { Database } from '../../service/src/db/connection';
import { migrateDownTo, migrateToLatest } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import { getPost } from '../../service/src/posts/posts.repository';
import { sleep } from '../../tools/harness/client';
import { countOf } from '../../tools/harness/postgres';
import { captureLog, migrateFirst, onFresh, planOf, rowsOf, testOnPostgres } from './helpers';

const logger = createLogger('silent');

/** The `name` column of a catalogue query's rows, in its order. */
const names = async (db: Database, sql: string): Promise<string[]> =>
  (await rowsOf<{ name: string }>(db.knex, sql)).map((r) => r.name);
const tables = (db: Database) =>
  names(db, "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename");
const indexes = (db: Database) =>
  names(db, "SELECT indexname AS name FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname");
const sequences = (db: Database) =>
  names(db, "SELECT relname AS name FROM pg_class WHERE relkind = 'S' ORDER BY relname");

const SCHEMA_TABLES = [
  'knex_migrations',
  'knex_migrations_lock',
  'post_vote_counts',
  'posts',
  'schema_backfills',
  'users',
  'votes',
];

/** A fresh database at the latest schema for one case, closed and dropped after it. */
const onMigrated = (work: (db: Database) => Promise<void>): Promise<void> =>
  onFresh({}, async (db) => {
    await migrateToLatest(db, logger);
    await work(db);
  });

// The race is over in milliseconds and lost only now and then, so it is run several times.
const RACE_ROUNDS = 8;

testOnPostgres(
  'When three replicas migrate an empty database at once, then all succeed, each migration ran once and the schema is the one a single replica builds',
  async () => {
    for (let round = 0; round < RACE_ROUNDS; round++) {
      await onFresh({}, async (first, another) => {
        const replicas = [first, ...(await Promise.all([another(), another()]))];
        const applied = await Promise.all(replicas.map((db) => migrateToLatest(db, logger)));
        // Each migration by exactly one replica: between steps another may take the lock and go on.
        expect(applied.flat().sort()).toEqual(Object.keys(migrations).sort());
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
      });
    }
  },
);

test('When migrated, then the schema has the indexes the queries rely on', async () => {
  await onMigrated(async (db) => {
    expect(await indexes(db)).toEqual(
      expect.arrayContaining([
        'users_email_lower_unique',
        'users_email_folded_unique',
        'posts_newest',
        'posts_published_newest',
        'posts_title_trgm',
        'posts_title_folded_trgm',
        'posts_user_id',
        'votes_pkey',
        'votes_post_id',
      ]),
    );
    // On a table of any size, a search uses the folded title's trigram index; a login, the address's.
    await db.knex.raw('SET enable_seqscan = off');
    const plan = (sql: string) => planOf(db.knex, sql);
    expect(await plan("SELECT id FROM posts WHERE fold_case(title) LIKE fold_case('%Needle%')")).toContain(
      'posts_title_folded_trgm',
    );
    expect(
      await plan("SELECT id FROM users WHERE fold_case(email) = fold_case('Élan@example.com')"),
    ).toContain('users_email_folded_unique');
  });
});

/** Inserts `rows` into `table`; the ids they were given, in order. */
const insertIds = async (k: Knex, table: string, rows: object | object[]): Promise<number[]> =>
  (await k(table).insert(rows).returning<{ id: number }[]>('id')).map((r) => r.id);

/** Each post's stored count, or null where the post has none yet (not counted). */
async function storedCounts(k: Knex): Promise<Record<string, number | null>> {
  const rows = await k('posts as p')
    .leftJoin('post_vote_counts as c', 'c.post_id', 'p.id')
    .select<{ id: number; votes: number | null }[]>('p.id', 'c.votes')
    .orderBy('p.id');
  return Object.fromEntries(rows.map((r) => [String(r.id), r.votes]));
}

/** The backfill's progress row, as it stands. */
const backfillRow = (k: Knex) =>
  k<{ last_id: string; rows_done: string; finished_at: Date | null }>('schema_backfills').first();

/** The database as the previous release left it: no counts, no triggers, no backfill progress. */
async function asPreviousRelease(k: Knex): Promise<void> {
  await backfillProgress.down(k);
  await postVoteCounts.down(k);
}

test("When the vote-count migration meets votes cast before it, then it writes no post's row, readers count those posts' votes until the backfill has, and then each post's count is its number of votes, kept by later votes, withdrawals and deletions", async () => {
  await onMigrated(async (db) => {
    const k = db.knex;
    await asPreviousRelease(k);
    const voters = [1, 2, 3].map((n) => ({ email: `voter${String(n)}@example.com`, password: 'x' }));
    const [one, two, three] = await insertIds(k, 'users', voters);
    const posts = ['a', 'b'].map((title) => ({ title, content: 'c', published: true, user_id: one }));
    const [a, b] = await insertIds(k, 'posts', posts);
    await k('votes').insert([
      { user_id: one, post_id: a },
      { user_id: two, post_id: a },
      { user_id: three, post_id: a },
      { user_id: one, post_id: b },
    ]);
    const columnsBefore = await k('posts').columnInfo();
    await postVoteCounts.up(k);
    await backfillProgress.up(k);
    // The posts' row type is untouched: the previous release's prepared statements keep theirs.
    expect(await k('posts').columnInfo()).toEqual(columnsBefore);
    // The existing posts wait for the backfill; a new one starts at 0.
    expect(await storedCounts(k)).toEqual({ [String(a)]: null, [String(b)]: null });
    const [c] = await insertIds(k, 'posts', { title: 'c', content: 'c', published: true, user_id: one });
    // A vote before the backfill leaves "not counted" as it is; what a reader sees is still right.
    await k('votes').insert({ user_id: two, post_id: b });
    expect(await storedCounts(k)).toEqual({
      [String(a)]: null,
      [String(b)]: null,
      [String(c)]: 0,
    });
    const shown = await getPost(db, Number(b), 'public');
    expect(shown?.votes).toBe(2);
    expect(await backfillState(db)).toEqual([{ name: 'posts.vote_count', pending: true, rowsDone: 0 }]);

    await startBackfills(db, logger).done;
    expect(await storedCounts(k)).toEqual({ [String(a)]: 3, [String(b)]: 2, [String(c)]: 0 });
    expect(await backfillState(db)).toEqual([{ name: 'posts.vote_count', pending: false, rowsDone: 2 }]);
    await k('votes').insert({ user_id: two, post_id: c });
    await k('votes').where({ user_id: one, post_id: a }).delete();
    expect(await storedCounts(k)).toEqual({ [String(a)]: 2, [String(b)]: 2, [String(c)]: 1 });
    // A user's removal takes their votes (the cascade fires the trigger); a post's takes its own.
    await k('users').where({ id: two }).delete();
    expect(await storedCounts(k)).toEqual({ [String(a)]: 1, [String(b)]: 1, [String(c)]: 0 });
    await k('posts').where({ id: b }).delete();
    expect(await storedCounts(k)).toEqual({ [String(a)]: 1, [String(c)]: 0 });
  });
});

test('When the backfill runs in batches, stops half-way and starts again, then it carries on where it stopped and counts every post once', async () => {
  await onMigrated(async (db) => {
    const k = db.knex;
    const [user] = await insertIds(k, 'users', { email: 'many@example.com', password: 'x' });
    // Enough posts for several batches, each with as many votes as its id modulo 3.
    const posts = 2 * BACKFILL_BATCH_IDS + 10;
    await k.raw(`INSERT INTO posts (title, content, user_id) SELECT 't', 'c', ? FROM generate_series(1, ?)`, [
      Number(user),
      posts,
    ]);
    await k.raw(
      `INSERT INTO users (email, password) SELECT 'voter' || g || '@example.com', 'x' FROM generate_series(1, 2) g`,
    );
    await k.raw(
      `INSERT INTO votes (user_id, post_id)
       SELECT u.id, p.id FROM posts p JOIN users u ON u.email LIKE 'voter%'
       WHERE (SELECT count(*) FROM users u2 WHERE u2.email LIKE 'voter%' AND u2.id <= u.id) <= p.id % 3`,
    );
    // As if they were posted before the migration: not counted.
    await k('post_vote_counts').delete();
    await k('schema_backfills').delete();

    const first = startBackfills(db, logger);
    // Stopped after its first batch or so: the progress row keeps where it got to.
    await sleep(5);
    await first.stop();
    const mid = await backfillRow(k);
    expect(Number(mid?.last_id)).toBeGreaterThan(0);
    expect(Number(mid?.last_id)).toBeLessThan(posts);
    expect(mid?.finished_at).toBeNull();
    await startBackfills(db, logger).done;

    const wrong = await rowsOf(
      k,
      `SELECT p.id FROM posts p LEFT JOIN post_vote_counts c ON c.post_id = p.id
       WHERE c.votes IS DISTINCT FROM (SELECT count(*)::int FROM votes v WHERE v.post_id = p.id)`,
    );
    expect(wrong).toEqual([]);
    const done = await backfillRow(k);
    expect(Number(done?.rows_done)).toBe(posts);
    expect(done?.finished_at).not.toBeNull();
  });
});

test('When a database applied the first form of the vote-count migration (a posts.vote_count column), then it gets the count table beside it, its backfill counts every post, and the column keeps being kept', async () => {
  await onMigrated(async (db) => {
    const k = db.knex;
    await asPreviousRelease(k);
    // The first form: a counted column and its own trigger.
    await k.raw('ALTER TABLE posts ADD COLUMN vote_count integer NOT NULL DEFAULT 0');
    await k.raw(`
      CREATE FUNCTION posts_vote_count() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'INSERT' THEN UPDATE posts SET vote_count = vote_count + 1 WHERE id = NEW.post_id;
        ELSE UPDATE posts SET vote_count = vote_count - 1 WHERE id = OLD.post_id; END IF;
        RETURN NULL;
      END $$`);
    await k.raw(
      'CREATE TRIGGER votes_count AFTER INSERT OR DELETE ON votes FOR EACH ROW EXECUTE FUNCTION posts_vote_count()',
    );
    const [user] = await insertIds(k, 'users', { email: 'first@example.com', password: 'x' });
    const [post] = await insertIds(k, 'posts', { title: 't', content: 'c', user_id: user });
    await k('votes').insert({ user_id: user, post_id: post });
    await backfillProgress.up(k);
    expect(await backfillState(db)).toEqual([{ name: 'posts.vote_count', pending: true, rowsDone: 0 }]);
    await startBackfills(db, logger).done;
    expect(await storedCounts(k)).toEqual({ [String(post)]: 1 });
    await k('votes').where({ user_id: user }).delete();
    expect(await storedCounts(k)).toEqual({ [String(post)]: 0 });
    expect(await k('posts').select('vote_count')).toEqual([{ vote_count: 0 }]);
  });
});

test('When the database holds a migration this release does not know (a newer release ran it), then this release still starts and applies nothing', async () => {
  await onMigrated(async (db) => {
    await db
      .knex('knex_migrations')
      .insert({ name: '29991231000099_from_a_newer_release', batch: 99, migration_time: new Date() });
    expect(await migrateToLatest(db, logger)).toEqual([]);
  });
});

testOnPostgres(
  'When a table a migration alters is held by a long write transaction, then the migration waits no longer than its lock time-out each try, lets writes through between tries, and applies once the table is free',
  () =>
    onFresh({ DB_MIGRATION_LOCK_TIMEOUT_MS: '200' }, async (db, another) => {
      const holder = await another();
      const k = db.knex;
      await migrateToLatest(db, logger);
      await asPreviousRelease(k);
      await k('knex_migrations')
        .whereIn('name', ['20261125000005_post_vote_counts', '20261126000006_backfills'])
        .delete();
      // A writer holding posts for 1.5 s, as a slow request's transaction would.
      const held = holder.knex.transaction(async (trx) => {
        await trx.raw('LOCK TABLE posts IN ROW EXCLUSIVE MODE');
        await sleep(1500);
      });
      await sleep(100);
      const log = captureLog();
      const migrating = migrateToLatest(db, createLogger('info', log.stream));
      // While the migration waits between tries, another write to posts is not queued behind it.
      await sleep(400);
      const started = Date.now();
      await holder.knex.raw('UPDATE posts SET title = title WHERE false');
      expect(Date.now() - started).toBeLessThan(300);
      await held;
      expect(await migrating).toEqual(['20261125000005_post_vote_counts', '20261126000006_backfills']);
      expect(log.text()).toContain('waited lock_timeout');
    }),
);

/** Runs `work` with `extra` migrations shipped after the real ones, then ships only the real ones again. */
async function withExtraMigrations<T>(extra: Record<string, Migration>, work: () => Promise<T>): Promise<T> {
  Object.assign(migrations, extra);
  try {
    return await work();
  } finally {
    for (const name of Object.keys(extra)) Reflect.deleteProperty(migrations, name);
  }
}

/** A migration that builds an index CONCURRENTLY, so runs outside the migration transaction. */
const concurrentIndex = (name: string, definition: string): Migration => ({
  config: { transaction: false },
  up: (knex) => createIndexConcurrently(knex, name, definition),
  down: (knex) => dropIndexConcurrently(knex, name),
});

/** Each migration's batch, in the order they were applied. */
async function batches(k: Knex): Promise<Record<string, number>> {
  const rows = await k<{ name: string; batch: number }>('knex_migrations')
    .select('name', 'batch')
    .orderBy('id');
  return Object.fromEntries(rows.map((row) => [row.name, row.batch]));
}

test('When a migration exports config = { transaction: false }, then the migrations before it commit first, it runs alone outside the transaction (its CREATE INDEX CONCURRENTLY builds a valid index), each is a batch of its own, and migrate down --to undoes them, one that ran outside a transaction outside one', async () => {
  await onMigrated(async (db) => {
    const k = db.knex;
    const shipped = await batches(k);
    const extra: Record<string, Migration> = {
      '29990101000001_scratch_notes': {
        up: (knex) =>
          knex.raw('CREATE TABLE scratch_notes (id bigint GENERATED ALWAYS AS IDENTITY, body text)'),
        down: (knex) => knex.raw('DROP TABLE scratch_notes'),
      },
      // On a table the migration before created: built only if that one committed first.
      '29990101000002_scratch_notes_body': concurrentIndex('scratch_notes_body', 'scratch_notes (body)'),
      '29990101000003_scratch_tags': {
        up: (knex) => knex.raw('CREATE TABLE scratch_tags (id bigint GENERATED ALWAYS AS IDENTITY)'),
        down: (knex) => knex.raw('DROP TABLE scratch_tags'),
      },
    };
    await withExtraMigrations(extra, async () => {
      expect(await migrateToLatest(db, logger)).toEqual(Object.keys(extra));
      expect(await indexState(k, 'scratch_notes_body')).toBe('valid');
      const top = Math.max(...Object.values(shipped));
      expect(await batches(k)).toEqual({
        ...shipped,
        '29990101000001_scratch_notes': top + 1,
        '29990101000002_scratch_notes_body': top + 2,
        '29990101000003_scratch_tags': top + 3,
      });
      expect(await migrateToLatest(db, logger)).toEqual([]);
      expect(await migrateDownTo(db, logger, '29990101000002_scratch_notes_body')).toEqual([
        '29990101000003_scratch_tags',
      ]);
      expect(await migrateDownTo(db, logger, '29990101000001_scratch_notes')).toEqual([
        '29990101000002_scratch_notes_body',
      ]);
      expect(await indexState(k, 'scratch_notes_body')).toBe('missing');
      const lastShipped = Object.keys(shipped).sort().at(-1) ?? '';
      expect(await migrateDownTo(db, logger, lastShipped)).toEqual(['29990101000001_scratch_notes']);
      expect(await migrateDownTo(db, logger, lastShipped)).toEqual([]);
      expect(await batches(k)).toEqual(shipped);
    });
  });
});

testOnPostgres(
  'When a migration builds an index CONCURRENTLY while another session holds a long transaction writing to the table, then each try waits no longer than the lock time-out, the INVALID index a failed try leaves is dropped and built again, the index ends valid, and the table takes writes all along',
  () =>
    onFresh({ DB_MIGRATION_LOCK_TIMEOUT_MS: '200' }, async (db, another) => {
      // Its statements may run long (the seed); how long each write takes is measured here.
      const other = await another({ DB_STATEMENT_TIMEOUT_MS: '60000' });
      const index = 'posts_content_trgm_scratch';
      await migrateToLatest(db, logger);
      const [user] = await insertIds(other.knex, 'users', { email: 'builder@example.com', password: 'x' });
      const userId = Number(user);
      // Enough rows that the trigram index takes a second or two to build, as a larger table does.
      await other.knex.raw(
        `INSERT INTO posts (title, content, user_id)
         SELECT 'post ' || g, repeat('words of post ' || g || '. ', 6), ? FROM generate_series(1, 120000) g`,
        [userId],
      );
      await other.knex.raw('VACUUM ANALYZE posts');
      // A writer that holds posts for 1.5 s, as a slow request's transaction would.
      const held = other.knex.transaction(async (trx) => {
        await trx('posts').insert({ title: 'held', content: 'held', user_id: userId });
        await sleep(1500);
      });
      await sleep(100);
      const log = captureLog();
      const state = { done: false };
      const migrating = withExtraMigrations(
        {
          '29990101000010_posts_content_trgm': concurrentIndex(
            index,
            'posts USING gin (content gin_trgm_ops)',
          ),
        },
        () => migrateToLatest(db, createLogger('info', log.stream)),
      ).finally(() => {
        state.done = true;
      });
      // Writes to posts, and what the index looks like, all through the build.
      const writeMs: number[] = [];
      const seen = new Set<string>();
      while (!state.done) {
        const started = Date.now();
        await other
          .knex('posts')
          .insert({ title: 'during', content: 'written during the build', user_id: userId });
        writeMs.push(Date.now() - started);
        seen.add(await indexState(other.knex, index));
        await sleep(50);
      }
      await held;
      expect(await migrating).toEqual(['29990101000010_posts_content_trgm']);
      expect(await indexState(other.knex, index)).toBe('valid');
      expect(
        await rowsOf(other.knex, 'SELECT indexrelid::regclass FROM pg_index WHERE NOT indisvalid'),
      ).toEqual([]);
      // A try failed at the lock time-out and left the index INVALID; a later one replaced it.
      expect(log.text()).toContain('waited lock_timeout');
      expect(seen).toContain('invalid');
      // No write waited for the build: a plain CREATE INDEX would hold them for all of it.
      expect(writeMs.length).toBeGreaterThan(10);
      expect(Math.max(...writeMs)).toBeLessThan(500);
      // Every row, the held one and those written during the build, is in the index.
      await other.knex.raw('SET enable_seqscan = off');
      expect(
        await countOf(other.knex, "posts WHERE content LIKE '%during the build%' OR content = 'held'"),
      ).toBe(writeMs.length + 1);
    }),
);

test('When migrations are rolled back and applied again, then the schema comes back whole', async () => {
  await onMigrated(async (db) => {
    // Newest first, each one alone; those run outside the transaction are undone outside one.
    const undone = await migrateDownTo(db, logger, null);
    expect(undone).toEqual(Object.keys(migrations).sort().reverse());
    expect(await tables(db)).toEqual(['knex_migrations', 'knex_migrations_lock']);
    expect(await migrateToLatest(db, logger)).toHaveLength(Object.keys(migrations).length);
    expect(await tables(db)).toEqual(SCHEMA_TABLES);
  });
});

test("When the migrations run, then the app's session keeps its own time-outs (on the embedded database it is the one session the migrations ran on)", async () => {
  await onFresh({}, async (db) => {
    const timeouts = () =>
      rowsOf(
        db.knex,
        "SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement",
      );
    const before = await timeouts();
    // Down and up again, so that those run outside a transaction set their own time-outs both ways.
    await migrateToLatest(db, logger);
    await migrateDownTo(db, logger, null);
    expect(await migrateToLatest(db, logger)).toHaveLength(Object.keys(migrations).length);
    expect(await timeouts()).toEqual(before);
  });
});

test('When addresses stored before the e-mail policy are migrated, then they take the normalised form, unless another account already has it', async () => {
  await onFresh({}, async (db) => {
    // The schema as it was before the policy: the first three migrations only.
    await migrateFirst(db, 3);
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
  });
});

test('When the migrations folder is read, then migrations/index.ts lists every migration file in it, and nothing else', () => {
  const folder = path.join(__dirname, '..', '..', 'migrations');
  const files = readdirSync(folder)
    .filter((file) => file !== 'index.ts' && /\.[cm]?[jt]s$/.test(file))
    .map((file) => file.replace(/\.[cm]?[jt]s$/, ''));
  expect(Object.keys(migrations).sort()).toEqual(files.sort());
});
