import type { Database } from '../db/connection';
import { brokenConstraint } from '../db/errors';
import { statement } from '../db/statements';

type VoteKey = { userId: number; postId: number };

export const insertVote = statement<VoteKey>('vote_insert', (knex, param) =>
  knex('votes')
    .insert({ user_id: param('userId'), post_id: param('postId') })
    .onConflict(['user_id', 'post_id'])
    .ignore()
    .returning('post_id'),
);

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
 * Adds a vote. The primary key (user_id, post_id) decides between simultaneous identical votes:
 * exactly one insert wins, the others see the conflict.
 */
export async function addVote(
  db: Database,
  userId: number,
  postId: number,
): Promise<'added' | 'exists' | 'no-post' | 'no-user'> {
  try {
    const inserted = await db.run(insertVote, { userId, postId });
    return inserted.length > 0 ? 'added' : 'exists';
  } catch (error) {
    // The post, or the voter's own user, was deleted between the checks and the insert.
    const key = brokenConstraint(error, '23503');
    if (key === 'votes_post_id_foreign') return 'no-post';
    if (key === 'votes_user_id_foreign') return 'no-user';
    throw error;
  }
}

export async function removeVote(db: Database, userId: number, postId: number): Promise<boolean> {
  return (await db.run(deleteVote, { userId, postId })).length > 0;
}
