import type { Database } from '../database';
import { errorFields } from '../database-errors';

/**
 * Adds a vote. The primary key (user_id, post_id) decides between simultaneous identical votes:
 * exactly one insert wins, the others see the conflict.
 */
export async function addVote(
  db: Database,
  userId: number,
  postId: number,
): Promise<'added' | 'exists' | 'no-post'> {
  try {
    const inserted = await db
      .knex('votes')
      .insert({ user_id: userId, post_id: postId })
      .onConflict(['user_id', 'post_id'])
      .ignore()
      .returning('post_id');
    return inserted.length > 0 ? 'added' : 'exists';
  } catch (error) {
    // The post was deleted between the existence check and the insert.
    if (errorFields(error).code === '23503') return 'no-post';
    throw error;
  }
}

export async function removeVote(db: Database, userId: number, postId: number): Promise<boolean> {
  // RETURNING rather than the affected-row count: knex-pglite reports a delete's count differently.
  const deleted = await db
    .knex('votes')
    .where({ user_id: userId, post_id: postId })
    .delete()
    .returning('post_id');
  return deleted.length > 0;
}
