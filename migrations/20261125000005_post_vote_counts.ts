import type { Knex } from 'knex';

/**
 * Each post's number of votes, in a table of its own (`post_vote_counts`) kept by triggers, so a
 * list reads ten counts instead of counting every vote of ten posts per request. A trigger on
 * `posts` gives each new post its row (0); one on `votes` adds or takes one for each vote cast or
 * withdrawn, also those removed with their user or post.
 *
 * Online (docs/migrations.md): no row of `posts` is written or rewritten, and its row type stays
 * as it was, so the previous release's prepared `posts.*` statements keep their result type. The
 * posts that existed before have no row: they are "not counted yet", readers count their votes
 * themselves, and the background backfill `posts.vote_count` (below) counts them in batches once
 * the release serves. A vote on such a post changes no count (there is no row to change).
 *
 * Databases that applied the first form of this migration (a `posts.vote_count` column counted in
 * the migration transaction) keep it; migration 20261126000006 gives them this table beside it.
 */
export async function up(knex: Knex): Promise<void> {
  await createVoteCounts(knex);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TRIGGER posts_start_count ON posts');
  await knex.raw('DROP TRIGGER votes_keep_count ON votes');
  await knex.raw('DROP FUNCTION post_vote_counts_start()');
  await knex.raw('DROP FUNCTION post_vote_counts_keep()');
  await knex.raw('DROP TABLE post_vote_counts');
}

/** The table, its functions and triggers; also what 20261126000006 runs where this did not. */
export async function createVoteCounts(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE post_vote_counts (
      post_id integer PRIMARY KEY REFERENCES posts (id) ON DELETE CASCADE,
      votes integer NOT NULL
    )`);
  await knex.raw(`
    CREATE FUNCTION post_vote_counts_start() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO post_vote_counts (post_id, votes) VALUES (NEW.id, 0);
      RETURN NULL;
    END
    $$`);
  // The post's row is locked (FOR KEY SHARE, as the foreign key's own check does on an insert)
  // before its count changes, so a backfill batch that holds its posts FOR UPDATE counts each
  // vote once: one committed before the batch's lock is in its count, one after it waits here.
  await knex.raw(`
    CREATE FUNCTION post_vote_counts_keep() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM 1 FROM posts WHERE id = NEW.post_id FOR KEY SHARE;
        UPDATE post_vote_counts SET votes = votes + 1 WHERE post_id = NEW.post_id;
      ELSE
        PERFORM 1 FROM posts WHERE id = OLD.post_id FOR KEY SHARE;
        UPDATE post_vote_counts SET votes = votes - 1 WHERE post_id = OLD.post_id;
      END IF;
      RETURN NULL;
    END
    $$`);
  await knex.raw(`
    CREATE TRIGGER posts_start_count AFTER INSERT ON posts
    FOR EACH ROW EXECUTE FUNCTION post_vote_counts_start()`);
  await knex.raw(`
    CREATE TRIGGER votes_keep_count AFTER INSERT OR DELETE ON votes
    FOR EACH ROW EXECUTE FUNCTION post_vote_counts_keep()`);
}

/**
 * Every post's count from `votes`, for a bulk load with both triggers disabled (the bench's seed):
 * one statement instead of a trigger call per row.
 */
export const RECOUNT_VOTES = `
  INSERT INTO post_vote_counts (post_id, votes)
  SELECT p.id, count(v.post_id)::int FROM posts p LEFT JOIN votes v ON v.post_id = p.id GROUP BY p.id
  ON CONFLICT (post_id) DO UPDATE SET votes = EXCLUDED.votes`;

/**
 * Counts the posts in (from, to] not counted yet. Their rows are locked first, in a statement of
 * their own: a vote committed before the lock is then seen by the count (READ COMMITTED takes a new
 * snapshot per statement), and one cast or withdrawn after it waits in the trigger, which locks the
 * post too, and changes the count once this batch commits. Counting in one statement alone would
 * miss a vote committed between its snapshot and its insert.
 */
export const backfill = {
  name: 'posts.vote_count',
  table: 'posts',
  async batch(trx: Knex.Transaction, from: number, to: number): Promise<number> {
    await trx.raw('SELECT count(*) FROM (SELECT 1 FROM posts WHERE id > ? AND id <= ? FOR UPDATE) locked', [
      from,
      to,
    ]);
    const { rows } = await trx.raw<{ rows: { counted: number }[] }>(
      `WITH counted AS (
         INSERT INTO post_vote_counts (post_id, votes)
         SELECT p.id, (SELECT count(*)::int FROM votes v WHERE v.post_id = p.id)
         FROM posts p
         WHERE p.id > ? AND p.id <= ?
           AND NOT EXISTS (SELECT 1 FROM post_vote_counts c WHERE c.post_id = p.id)
         ON CONFLICT (post_id) DO NOTHING
         RETURNING 1)
       SELECT count(*)::int AS counted FROM counted`,
      [from, to],
    );
    return rows[0]?.counted ?? 0;
  },
};
