import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  // pg_trgm is a trusted extension (PostgreSQL 13+): the database owner may create it.
  await knex.raw('CREATE EXTENSION IF NOT EXISTS pg_trgm');
  await knex.schema.createTable('posts', (t) => {
    t.increments('id').primary();
    t.string('title', 300).notNullable();
    t.text('content').notNullable();
    t.boolean('published').notNullable().defaultTo(true);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.integer('user_id').notNullable().references('id').inTable('users').onDelete('CASCADE');
  });
  // Newest-first pages: the public list walks the partial index, the caller's list the full one.
  await knex.raw('CREATE INDEX posts_newest ON posts (created_at DESC, id DESC)');
  await knex.raw('CREATE INDEX posts_published_newest ON posts (created_at DESC, id DESC) WHERE published');
  // The caller's own drafts, and the cascade when a user is deleted.
  await knex.raw('CREATE INDEX posts_user_id ON posts (user_id)');
  // Case-insensitive substring search (ILIKE '%…%') on titles at any table size.
  await knex.raw('CREATE INDEX posts_title_trgm ON posts USING gin (title gin_trgm_ops)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('posts');
}
