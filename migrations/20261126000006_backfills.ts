import type { Knex } from 'knex';
import { createVoteCounts } from './20261125000005_post_vote_counts';

/**
 * Where background backfills (service/src/db/backfill.ts) keep their progress, so a restarted or
 * second replica carries on from the last batch instead of starting over. A database that applied
 * the first form of migration 20261125000005 (a `posts.vote_count` column with its own trigger,
 * kept as it is while a release that reads it may still run) gets the vote count table here; its
 * backfill then counts every post.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('schema_backfills', (t) => {
    t.text('name').primary();
    // The highest id to visit: the table's last row when the backfill began; later rows need none.
    t.bigInteger('target_id');
    t.bigInteger('last_id').notNullable().defaultTo(0);
    t.bigInteger('rows_done').notNullable().defaultTo(0);
    t.timestamp('started_at', { useTz: true });
    t.timestamp('finished_at', { useTz: true });
  });
  if (!(await knex.schema.hasTable('post_vote_counts'))) await createVoteCounts(knex);
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('schema_backfills');
}
