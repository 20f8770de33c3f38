import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('votes', (t) => {
    t.integer('user_id').notNullable().references('id').inTable('users').onDelete('CASCADE');
    t.integer('post_id').notNullable().references('id').inTable('posts').onDelete('CASCADE');
    // One vote per user and post: the key itself refuses a second one, even under concurrency.
    t.primary(['user_id', 'post_id']);
  });
  // Counting a post's votes and the cascade when a post is deleted.
  await knex.raw('CREATE INDEX votes_post_id ON votes (post_id)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('votes');
}
