import bcrypt from 'bcrypt';
import type { Knex } from 'knex';
import { openDatabase } from '../../service/src/db/connection';
import { RECOUNT_VOTES } from '../../migrations/20261125000005_post_vote_counts';
import { migrateToLatest } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import { loadSettings } from '../../service/src/settings';
import { connectionEnv, countOf, knexTo, postgresServer } from './postgres';

export const BENCH_PASSWORD = 'bench-password-123';
/** In about one title in ten thousand, and in about one in ten. */
export const RARE_WORD = 'zephyr';
export const COMMON_WORD = 'news';

/**
 * The PostgreSQL server the bench seeds and measures (tools/harness/postgres.ts: DB_* or the local
 * one); a bench may seed and serve from one it runs itself (tools/bench/backup.ts).
 */
export const pgConnection = postgresServer;

/**
 * The environment every bench server gets on a seeded database: production mode, warn-level logs,
 * the real bcrypt cost, an ephemeral metrics port (several servers run at once), one secret.
 */
export const benchServiceEnv = (database: string, server = pgConnection): Record<string, string> => ({
  NODE_ENV: 'production',
  METRICS_PORT: '0',
  LOG_LEVEL: 'warn',
  SECRET_KEY: 'bench-signing-secret-that-is-long-enough-0123456789',
  BCRYPT_ROUNDS: '12',
  ...connectionEnv(server),
  DB_NAME: database,
});

/** Ten posts per user and two votes per post on average, as a small community site might have. */
export const usersFor = (posts: number): number => Math.max(100, Math.round(posts / 10));

// Plain words that contain neither search word, so the chosen frequencies hold.
const WORDS = `
  apple river garden coffee morning travel music winter summer city market forest guide recipe review
  story photo update weekly tips design code data health sport game book film science space ocean
  mountain bridge light dark simple quick better first last open small large local global green blue
  red gold silver train bike road home family friend school work team plan idea note list day
`
  .trim()
  .split(/\s+/);

export interface Rows {
  users: number;
  posts: number;
  /** Votes drawn; duplicates (same user, same post) are dropped, so a few fewer are stored. */
  votes: number;
  /** The bcrypt hash every user gets (BENCH_PASSWORD's, at the cost the caller chose). */
  passwordHash: string;
  /**
   * Whether the schema keeps vote counts (`post_vote_counts`, migration 0005 on): they are then set once
   * after the votes. The previous release's schema has no such column (the upgrade suite seeds it).
   */
  voteCounts: boolean;
}

/**
 * Fills empty `users`, `posts` and `votes` set-based in SQL (generate_series): users
 * `user<n>@bench.example`, titles of common words with the search words at their frequencies.
 */
export async function insertRows(k: Knex, rows: Rows): Promise<void> {
  const { users, posts, votes, passwordHash, voteCounts } = rows;
  await k.raw('SELECT setseed(0.42)');
  await k.raw(
    `INSERT INTO users (email, password, created_at)
     SELECT 'user' || g || '@bench.example', ?, timestamptz '2023-01-01' + g * interval '1 minute'
     FROM generate_series(1, ?) g`,
    [passwordHash, users],
  );
  // Counted once at the end (RECOUNT_VOTES) rather than by the triggers row by row.
  if (voteCounts) await k.raw('ALTER TABLE posts DISABLE TRIGGER posts_start_count');
  // Titles of 3 to 8 common words, some with the common or the rare search word; creation
  // times rise with the id, with some jitter; nine in ten published.
  await k.raw(
    `INSERT INTO posts (title, content, published, created_at, user_id)
     SELECT t.title, repeat(t.title || '. ', 6), random() < 0.9,
            timestamptz '2024-01-01' + g * interval '30 seconds' + random() * interval '25 seconds',
            1 + floor(random() * ?)::int
     FROM generate_series(1, ?) g
     CROSS JOIN LATERAL (
       SELECT initcap(string_agg((?::text[])[1 + floor(random() * ?)::int], ' '))
              || CASE WHEN random() < 0.1 THEN ' ${COMMON_WORD}' ELSE '' END
              || CASE WHEN random() < 0.0001 THEN ' ${RARE_WORD}' ELSE '' END AS title
       FROM generate_series(1, 3 + g % 6)
     ) t`,
    [users, posts, WORDS, WORDS.length],
  );
  // Newer posts draw more votes; duplicates (same user, same post) are dropped. Counted once
  // afterwards rather than by the trigger row by row (two million updates at the largest size).
  if (voteCounts) await k.raw('ALTER TABLE votes DISABLE TRIGGER votes_keep_count');
  await k.raw(
    `INSERT INTO votes (user_id, post_id)
     SELECT DISTINCT 1 + floor(random() * ?)::int, ? - floor(? * power(random(), 2))::int
     FROM generate_series(1, ?)
     ON CONFLICT DO NOTHING`,
    [users, posts, posts, votes],
  );
  if (voteCounts) {
    await k.raw(RECOUNT_VOTES);
    await k.raw('ALTER TABLE votes ENABLE TRIGGER votes_keep_count');
    await k.raw('ALTER TABLE posts ENABLE TRIGGER posts_start_count');
    // Every post is counted: the service's backfill has nothing to walk.
    await k.raw(
      `INSERT INTO schema_backfills (name, started_at, finished_at) VALUES ('posts.vote_count', now(), now())
       ON CONFLICT (name) DO UPDATE SET finished_at = now()`,
    );
  }
}

/** After a bulk insert: the planner's statistics and the visibility map, as a long-lived database has them. */
export async function vacuumAnalyze(k: Knex): Promise<void> {
  for (const table of ['users', 'posts', 'votes', 'post_vote_counts'])
    if (await k.schema.hasTable(table)) await k.raw('VACUUM ANALYZE ??', [table]);
}

export interface SeedInfo {
  database: string;
  posts: number;
  users: number;
  votes: number;
  seededNow: boolean;
  seedSeconds: number;
}

/**
 * A database `sp_bench_<posts>` on `server` with the schema the service migrates and `posts` posts,
 * built set-based in SQL (generate_series); reused when it already holds that many.
 */
export async function seed(
  posts: number,
  reseed: boolean,
  log: (line: string) => void,
  server = pgConnection,
): Promise<SeedInfo> {
  const database = `sp_bench_${String(posts)}`;
  const users = usersFor(posts);
  const admin = knexTo('postgres', 1, server);
  const exists =
    (await admin.raw<{ rows: unknown[] }>('SELECT 1 FROM pg_database WHERE datname = ?', [database])).rows
      .length > 0;
  if (exists && reseed) await admin.raw(`DROP DATABASE "${database}" WITH (FORCE)`);
  if (!exists || reseed) await admin.raw(`CREATE DATABASE "${database}"`);
  await admin.destroy();

  const settings = loadSettings({
    ...process.env,
    ...connectionEnv(server),
    DB_NAME: database,
    LOG_LEVEL: 'warn',
    DB_STATEMENT_TIMEOUT_MS: '600000',
  });
  const db = await openDatabase(settings, createLogger('warn'));
  await migrateToLatest(db, createLogger('warn'));
  const k: Knex = db.knex;
  const started = Date.now();
  let seededNow = false;
  if ((await countOf(k, 'posts')) !== posts || (await countOf(k, 'users')) !== users) {
    seededNow = true;
    log(`seeding ${database}: ${String(users)} users, ${String(posts)} posts, ~${String(2 * posts)} votes`);
    // CASCADE: the vote counts hang on posts.
    await k.raw('TRUNCATE votes, posts, users RESTART IDENTITY CASCADE');
    // One bcrypt hash (cost 12) shared by all: hashing each user's would take hours, and logins cost the same.
    const passwordHash = await bcrypt.hash(BENCH_PASSWORD, 12);
    await insertRows(k, { users, posts, votes: 2 * posts, passwordHash, voteCounts: true });
    await vacuumAnalyze(k);
  }
  const votes = await countOf(k, 'votes');
  await db.close();
  return { database, posts, users, votes, seededNow, seedSeconds: (Date.now() - started) / 1000 };
}
