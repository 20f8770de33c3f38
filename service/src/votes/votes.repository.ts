import type { Knex } from 'knex';
import type { Database } from '../db/connection';
import { brokenConstraint } from '../db/errors';
import { statement, type Statement } from '../db/statements';

type VoteKey = { userId: number; postId: number };

/** The post `id` if `userId`'s user may see it, as a query: the posts' visibility rule, which app.ts hands in. */
export type VisiblePost = (knex: Knex, id: number, userId: number) => Knex.QueryBuilder;

const insertVotes = new WeakMap<VisiblePost, Statement<VoteKey>>();

/** What the vote's insert saw: the post visible to the voter, and whether the vote went in. */
interface VoteInsertRow {
  visible: boolean;
  added: boolean;
}

/**
 * The vote, inserted from the post's row as the voter may see it, locked FOR SHARE until the vote
 * commits: a change that hides the post either waits for the vote or is seen by it (the row is read
 * again once the change commits), and a deletion waits. The post's row is locked before the vote's,
 * in the order a deletion and a withdrawal take them too. Its one row says whether the post was
 * visible as well, so a vote not added is told apart (missing or already cast) by what the insert
 * saw, not by a later read the post may have changed for. The lock writes to the WAL, so even a
 * vote found cast already commits, waiting for the synchronous standby as readConfirmed's reads do:
 * a 409 never rests on a vote the primary alone holds. One statement per visibility rule.
 */
export function insertVote(visible: VisiblePost): Statement<VoteKey> {
  let made = insertVotes.get(visible);
  if (!made) {
    made = statement<VoteKey>('vote_insert', (knex, param) =>
      knex.raw(
        `WITH post AS ?,
         added AS (INSERT INTO ?? (??, ??) SELECT ?::integer, ?? FROM post ON CONFLICT (??, ??) DO NOTHING RETURNING ??)
         SELECT EXISTS (SELECT 1 FROM post) AS visible, EXISTS (SELECT 1 FROM added) AS added`,
        [
          visible(knex, param('postId'), param('userId')).select('id').forShare(),
          'votes',
          'user_id',
          'post_id',
          param('userId'),
          'id',
          'user_id',
          'post_id',
          'post_id',
        ],
      ),
    );
    insertVotes.set(visible, made);
  }
  return made;
}

/**
 * Withdraws a vote, locking the post's row (FOR KEY SHARE, as the count's trigger does) before the
 * vote's: the same order as a post's deletion, which locks the post and then deletes its votes, so
 * the two wait for each other instead of deadlocking. RETURNING rather than the affected-row count:
 * PGlite reports a delete's count differently.
 */
export const deleteVote = statement<VoteKey>('vote_delete', (knex, param) =>
  knex('votes')
    .with('post', (post) => post.select('id').from('posts').where('id', param('postId')).forKeyShare())
    .where({ user_id: param('userId') })
    .whereIn('post_id', knex.select('id').from('post'))
    .delete()
    .returning('post_id'),
);

/**
 * Adds a vote on a post the voter may see: `missing` when there is none (missing or hidden),
 * `voted` when their vote is there already. The primary key (user_id, post_id) decides between
 * simultaneous identical votes: exactly one insert wins, the others see the conflict.
 */
export async function addVote(
  db: Database,
  visible: VisiblePost,
  userId: number,
  postId: number,
): Promise<'added' | 'voted' | 'missing' | 'no-user'> {
  try {
    const [row] = await db.run<VoteInsertRow, VoteKey>(insertVote(visible), { userId, postId });
    if (row?.added) return 'added';
    return row?.visible ? 'voted' : 'missing';
  } catch (error) {
    // The voter's own user was deleted after they were looked up.
    if (brokenConstraint(error, '23503') === 'votes_user_id_foreign') return 'no-user';
    throw error;
  }
}

/** Withdraws the vote; false when there was none (the route says so once the standby confirms). */
export async function removeVote(db: Database, userId: number, postId: number): Promise<boolean> {
  return (await db.run(deleteVote, { userId, postId })).length > 0;
}
