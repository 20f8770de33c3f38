import type { Knex } from 'knex';

/**
 * `fold_case(text)`: letter case folded the same way on every database, whatever locale it was
 * created with. `lower()` and `ILIKE` fold by the database's LC_CTYPE, and under `C` (CloudNativePG's
 * default initdb) that is ASCII alone, so `Élan@…` and `élan@…` were two accounts and a search for
 * `été` missed `ÉTÉ`. The function lowers with ICU's root locale (`und-x-icu`, present wherever
 * PostgreSQL is built with ICU: the chart's images, Debian's packages, PGlite) and maps the final
 * sigma to σ, as Unicode case folding does, so a substring ending in σ is found inside a word too.
 * A plain SQL function, so the planner inlines it and an index on `fold_case(x)` serves
 * `fold_case(x) = …` and `fold_case(x) LIKE …`.
 *
 * `users.email_lookalike`: true on an account whose address folds to an older account's (two
 * accounts made while only ASCII was folded; migration 20261128000008 marks them). Both are kept;
 * docs/operations.md says what an operator does with them. Users is read by named columns in
 * every release, so a column may be added (docs/migrations.md, rule 6).
 */
export async function up(knex: Knex): Promise<void> {
  const { rows } = await knex.raw<{ rows: unknown[] }>(
    "SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu' AND collprovider = 'i'",
  );
  if (rows.length === 0)
    throw new Error(
      'this PostgreSQL server was built without ICU (no collation "und-x-icu"): case folding ' +
        "needs it; use a build with ICU (the chart's images and Debian's packages have it)",
    );
  await knex.raw(`
    CREATE FUNCTION fold_case(text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT replace(lower($1 COLLATE "und-x-icu"), 'ς', 'σ') $$`);
  await knex.raw('ALTER TABLE users ADD COLUMN email_lookalike boolean');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE users DROP COLUMN email_lookalike');
  await knex.raw('DROP FUNCTION fold_case(text)');
}
