import type { Knex } from 'knex';
import { createUniqueIndexSettling, dropIndexConcurrently } from '../service/src/db/concurrent-index';

/**
 * One post per user and `Idempotency-Key` (migration 20261129000010): the index decides between a
 * request and its retry, or two tries sent at once. Posts without a key are not in it. Built
 * concurrently (docs/migrations.md, rule 5).
 *
 * Built again after `migrate down` undid it while the service went on taking keyed posts, it may
 * meet one key on several of a user's posts. None is deleted: the oldest keeps the key, which a
 * retry then answers with, and the others lose it, as posts made without one.
 */
export const config = { transaction: false };

const IDEMPOTENCY_INDEX = 'posts_user_id_idempotency_key_unique';

export async function up(knex: Knex): Promise<void> {
  await createUniqueIndexSettling(
    knex,
    IDEMPOTENCY_INDEX,
    'posts (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL',
    forgetRepeatedKeys,
  );
}

/** Clears the key of every post but the oldest of its user that carries the same one. */
async function forgetRepeatedKeys(knex: Knex): Promise<void> {
  await knex.raw(`
    UPDATE posts SET idempotency_key = NULL, idempotency_digest = NULL
    WHERE id IN (
      SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY user_id, idempotency_key ORDER BY id) AS nth
        FROM posts WHERE idempotency_key IS NOT NULL
      ) keyed
      WHERE nth > 1
    )`);
}

export async function down(knex: Knex): Promise<void> {
  await dropIndexConcurrently(knex, IDEMPOTENCY_INDEX);
}
