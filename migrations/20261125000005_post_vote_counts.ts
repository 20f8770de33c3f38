import type { Knex } from 'knex';

/**
 * Each post carries its number of votes (`posts.vote_count`), kept by a trigger on `votes`, so a
 * list reads ten counts instead of counting every vote of ten posts per request: on the bench's
 * data that counting was a fifth of the database's time on a search. The trigger is the one place
 * that keeps it: votes cast and withdrawn, and votes removed with their user or post (the cascades
 * fire it too; a vote removed with its post updates no row, as the post is gone). A vote thus costs
 * one more row update, in the same transaction, so a count is never seen out of step with `votes`.
 */
/** Sets every post's count from `votes` (the bench's seed reuses it after a bulk insert). */
export const RECOUNT_VOTES = `
  UPDATE posts p SET vote_count = c.n
  FROM (SELECT post_id, count(*)::int AS n FROM votes GROUP BY post_id) c
  WHERE p.id = c.post_id`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE posts ADD COLUMN vote_count integer NOT NULL DEFAULT 0');
  await knex.raw(RECOUNT_VOTES);
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
