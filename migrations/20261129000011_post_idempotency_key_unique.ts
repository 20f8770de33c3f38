import type { Knex } from 'knex';
import { createIndexConcurrently, dropIndexConcurrently } from '../service/src/db/concurrent-index';

/**
 * One post per user and `Idempotency-Key` (migration 20261129000010): the index decides between a
 * request and its retry, or two tries sent at once. Posts without a key are not in it. Built
 * concurrently (docs/migrations.md, rule 5).
 */
export const config = { transaction: false };

const IDEMPOTENCY_INDEX = 'posts_user_id_idempotency_key_unique';

export async function up(knex: Knex): Promise<void> {
  await createIndexConcurrently(
    knex,
    IDEMPOTENCY_INDEX,
    'posts (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL',
    { unique: true },
  );
}

export async function down(knex: Knex): Promise<void> {
  await dropIndexConcurrently(knex, IDEMPOTENCY_INDEX);
}
