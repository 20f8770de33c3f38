import type { Knex } from 'knex';

/**
 * Where background backfills (service/src/db/backfill.ts) keep their progress, so a restarted or
 * second replica carries on from the last batch instead of starting over. A database whose vote
 * counts were set by the first form of migration 20261125000005 (its column is NOT NULL) has
 * nothing to count: its backfill is recorded as finished here, read from the catalogue, no scan.
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
  await knex.raw(`
    INSERT INTO schema_backfills (name, started_at, finished_at)
    SELECT 'posts.vote_count', now(), now()
    FROM pg_attribute
    WHERE attrelid = 'posts'::regclass AND attname = 'vote_count' AND attnotnull`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('schema_backfills');
}
