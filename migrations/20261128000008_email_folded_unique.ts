import type { Knex } from 'knex';
import { createUniqueIndexSettling, dropIndexConcurrently } from '../service/src/db/concurrent-index';

/**
 * One account per address in any letter case, on every locale: a unique index on
 * `fold_case(email)` (migration 20261128000007), built concurrently (docs/migrations.md, rule 5).
 *
 * A database whose locale folded only ASCII may already hold accounts whose addresses differ only
 * in the case of other letters (`élan@…` and `Élan@…`). None is deleted or changed: every one but
 * the oldest of such a group is marked `email_lookalike`, and the index keys a marked account by its
 * own id as well, so the group builds and stays. Marking touches those rows alone; finding them
 * reads the table once, as the build does. An older release still serving may register a new
 * look-alike between the marking and the build (its own index folds by the locale); the build then
 * fails on the duplicate and is tried again after marking anew.
 */
export const config = { transaction: false };

const INDEX = 'users_email_folded_unique';

export async function up(knex: Knex): Promise<void> {
  await createUniqueIndexSettling(
    knex,
    INDEX,
    'users (fold_case(email), (CASE WHEN email_lookalike THEN id ELSE 0 END))',
    markLookalikes,
  );
}

/** Marks every account but the oldest whose address folds to the same as another's. */
async function markLookalikes(knex: Knex): Promise<void> {
  await knex.raw(`
    UPDATE users SET email_lookalike = true
    WHERE id IN (
      SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY fold_case(email) ORDER BY id) AS nth FROM users
      ) grouped
      WHERE nth > 1
    )
    AND email_lookalike IS NOT TRUE`);
}

export async function down(knex: Knex): Promise<void> {
  await dropIndexConcurrently(knex, INDEX);
}
