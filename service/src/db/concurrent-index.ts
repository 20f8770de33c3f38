import type { Knex } from 'knex';
import { errorFields } from './errors';

/**
 * Indexes on existing tables, built and dropped without blocking writes (docs/migrations.md, rule
 * 5), for a migration that exports `config = { transaction: false }`: the migrator runs it alone,
 * outside its transaction: under the migration's lock_timeout and retries where its connection is to
 * the server itself, under its client-side deadline alone behind a pooler.
 *
 * A concurrent build that fails (a lock time-out, a cancel, a crash) leaves its index behind,
 * INVALID: never used by queries, yet still updated by every write, and skipped by `IF NOT EXISTS`.
 * So each try first drops such a leftover of the same name, then builds; a valid index of that
 * name is kept, so a try after a build that succeeded but was not recorded does nothing.
 */

function refuseInTransaction(knex: Knex, what: string): void {
  if (knex.isTransaction)
    throw new Error(
      `${what} cannot run inside a transaction: export \`config = { transaction: false }\` from the migration`,
    );
}

/** Whether the index `name` (in the search path) exists, and if so whether it is valid. */
export async function indexState(knex: Knex, name: string): Promise<'missing' | 'valid' | 'invalid'> {
  const { rows } = await knex.raw<{ rows: { valid: boolean }[] }>(
    'SELECT indisvalid AS valid FROM pg_index WHERE indexrelid = to_regclass(?)',
    [name],
  );
  const [row] = rows;
  if (!row) return 'missing';
  return row.valid ? 'valid' : 'invalid';
}

/**
 * `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS <name> ON <definition>`, after dropping an
 * invalid leftover of `name`. `definition` is what follows ON, e.g. `posts USING gin (title
 * gin_trgm_ops)`. A unique build that meets a duplicate fails (23505) and leaves its index INVALID,
 * like any failed build: the next try drops it.
 */
export async function createIndexConcurrently(
  knex: Knex,
  name: string,
  definition: string,
  options: { unique?: boolean } = {},
): Promise<void> {
  refuseInTransaction(knex, 'CREATE INDEX CONCURRENTLY');
  if ((await indexState(knex, name)) === 'invalid') await dropIndexConcurrently(knex, name);
  const unique = options.unique ? 'UNIQUE ' : '';
  await knex.raw(`CREATE ${unique}INDEX CONCURRENTLY IF NOT EXISTS ?? ON ${definition}`, [name]);
}

/** How many times a unique build that met a duplicate is tried, each after settling the rows anew. */
const UNIQUE_TRIES = 3;

/**
 * A unique index on rows that may already break it: `settle` makes the keys distinct without
 * deleting a row, then the index is built. A release still serving may write a duplicate between
 * the two; the build then fails on it (23505) and both run again.
 */
export async function createUniqueIndexSettling(
  knex: Knex,
  name: string,
  definition: string,
  settle: (knex: Knex) => Promise<void>,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    await settle(knex);
    try {
      await createIndexConcurrently(knex, name, definition, { unique: true });
      return;
    } catch (error) {
      if (errorFields(error).code !== '23505' || attempt >= UNIQUE_TRIES) throw error;
    }
  }
}

/** `DROP INDEX CONCURRENTLY IF EXISTS <name>`: a migration's `down`, and a failed build's leftover. */
export async function dropIndexConcurrently(knex: Knex, name: string): Promise<void> {
  refuseInTransaction(knex, 'DROP INDEX CONCURRENTLY');
  await knex.raw('DROP INDEX CONCURRENTLY IF EXISTS ??', [name]);
}
