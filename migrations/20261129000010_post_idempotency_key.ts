import type { Knex } from 'knex';

/**
 * The `Idempotency-Key` a post was created with, and the digest of the request that sent it, so a
 * retried `POST /posts/` finds the post its first try made instead of making a second one. Both are
 * empty for a post created without a key. Nullable without a default: no row is rewritten.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE posts ADD COLUMN idempotency_key text, ADD COLUMN idempotency_digest text');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE posts DROP COLUMN idempotency_key, DROP COLUMN idempotency_digest');
}
