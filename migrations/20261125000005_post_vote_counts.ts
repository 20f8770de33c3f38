import type { Knex } from 'knex';

/**
 * Each post carries its number of votes (`posts.vote_count`), kept by a trigger on `votes`, so a
 * list reads ten counts instead of counting every vote of ten posts per request. The trigger is the
 * one place that keeps it: votes cast and withdrawn, and votes removed with their user or post.
 *
 * Online (docs/migrations.md): the column is added without a value for the posts that exist, so
 * no row is rewritten under the table's lock; new posts start at 0; NULL means "not counted yet",
 * and readers count those posts' votes themselves. The background backfill `posts.vote_count`
 * (service/src/db/backfill.ts) counts the existing posts in small batches once the release serves.
 * The trigger leaves NULL as NULL (NULL + 1), so a count is only ever set from the votes themselves.
 *
 * Databases that applied the first form of this migration (one transaction counting every post)
 * keep it: knex runs a migration once, by name.
 */
/** Sets every post's count from `votes` (the bench's seed reuses it after a bulk insert). */
export const RECOUNT_VOTES = `
  UPDATE posts p SET vote_count = c.n
  FROM (SELECT post_id, count(*)::int AS n FROM votes GROUP BY post_id) c
  WHERE p.id = c.post_id`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE posts ADD COLUMN vote_count integer');
  // Only rows inserted from now on take the default: the existing ones stay NULL, unrewritten.
  await knex.raw('ALTER TABLE posts ALTER COLUMN vote_count SET DEFAULT 0');
  await knex.raw(`
    CREATE FUNCTION posts_vote_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        UPDATE posts SET vote_count = vote_count + 1 WHERE id = NEW.post_id;
      ELSE
        UPDATE posts SET vote_count = vote_count - 1 WHERE id = OLD.post_id;
      END IF;
      RETURN NULL;
    END
    $$`);
  await knex.raw(`
    CREATE TRIGGER votes_count AFTER INSERT OR DELETE ON votes
    FOR EACH ROW EXECUTE FUNCTION posts_vote_count()`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TRIGGER votes_count ON votes');
  await knex.raw('DROP FUNCTION posts_vote_count()');
  await knex.raw('ALTER TABLE posts DROP COLUMN vote_count');
}

/**
 * Counts the votes of the posts in (from, to] not yet counted. Their rows are locked first, in a
 * statement of their own: a vote committed before the lock is then seen by the count (READ
 * COMMITTED takes a new snapshot per statement), and one cast after it waits in the trigger and
 * adds itself to the count once this batch commits. Counting in the UPDATE alone would miss a vote
 * committed between its snapshot and its lock on the row.
 */
export const backfill = {
  name: 'posts.vote_count',
  table: 'posts',
  async batch(trx: Knex.Transaction, from: number, to: number): Promise<number> {
    await trx.raw(
      'SELECT count(*) FROM (SELECT 1 FROM posts WHERE id > ? AND id <= ? AND vote_count IS NULL FOR UPDATE) locked',
      [from, to],
    );
    const { rows } = await trx.raw<{ rows: { counted: number }[] }>(
      `WITH counted AS (
         UPDATE posts p SET vote_count = (SELECT count(*)::int FROM votes v WHERE v.post_id = p.id)
         WHERE p.id > ? AND p.id <= ? AND p.vote_count IS NULL
         RETURNING 1)
       SELECT count(*)::int AS counted FROM counted`,
      [from, to],
    );
    return rows[0]?.counted ?? 0;
  },
};
