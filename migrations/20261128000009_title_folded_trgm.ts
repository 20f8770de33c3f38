import type { Knex } from 'knex';
import { createIndexConcurrently, dropIndexConcurrently } from '../service/src/db/concurrent-index';

/**
 * The search's trigram index on the folded title: the search compares `fold_case(title)` with the
 * folded term (migration 20261128000007), which the index on `title` itself cannot serve. Built
 * concurrently (docs/migrations.md, rule 5). `posts_title_trgm` stays while a release that
 * searches with `ILIKE` may serve; dropping it is a later release's contract step.
 */
export const config = { transaction: false };

const INDEX = 'posts_title_folded_trgm';

export async function up(knex: Knex): Promise<void> {
  await createIndexConcurrently(knex, INDEX, 'posts USING gin (fold_case(title) gin_trgm_ops)');
}

export async function down(knex: Knex): Promise<void> {
  await dropIndexConcurrently(knex, INDEX);
}
