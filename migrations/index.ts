import type { Knex } from 'knex';
import * as createUsers from './20261121000001_create_users';
import * as createPosts from './20261121000002_create_posts';
import * as createVotes from './20261121000003_create_votes';
import * as normaliseEmails from './20261123000004_normalise_emails';
import * as postVoteCounts from './20261125000005_post_vote_counts';
import * as backfillProgress from './20261126000006_backfills';
import * as foldCase from './20261128000007_fold_case';
import * as emailFoldedUnique from './20261128000008_email_folded_unique';
import * as titleFoldedTrgm from './20261128000009_title_folded_trgm';
import * as postIdempotencyKey from './20261129000010_post_idempotency_key';
import * as postIdempotencyKeyUnique from './20261129000011_post_idempotency_key_unique';

/**
 * A migration's data change, run in the background once the release serves (service/src/db/
 * backfill.ts): `batch` fills the rows of `table` whose id is in (from, to], idempotently, inside
 * the transaction it is given, and says how many it changed.
 */
export interface Backfill {
  name: string;
  table: string;
  batch(trx: Knex.Transaction, from: number, to: number): Promise<number>;
}

/** The backfills of the migrations, in the order they run. */
export const backfills: Backfill[] = [postVoteCounts.backfill];

/**
 * A migration module: `up`, `down` and knex's per-migration `config`. `{ transaction: false }` runs
 * it outside the migration transaction, alone, for what cannot run in one (`CREATE INDEX
 * CONCURRENTLY`: service/src/db/concurrent-index.ts, docs/migrations.md).
 */
export interface Migration extends Knex.Migration {
  config?: { transaction?: boolean };
}

/**
 * The migrations, in order. They are imported rather than read from disk so the same list runs
 * under ts-jest, tsx and the compiled image; add each new migration file here.
 */
export const migrations: Record<string, Migration> = {
  '20261121000001_create_users': createUsers,
  '20261121000002_create_posts': createPosts,
  '20261121000003_create_votes': createVotes,
  '20261123000004_normalise_emails': normaliseEmails,
  '20261125000005_post_vote_counts': postVoteCounts,
  '20261126000006_backfills': backfillProgress,
  '20261128000007_fold_case': foldCase,
  '20261128000008_email_folded_unique': emailFoldedUnique,
  '20261128000009_title_folded_trgm': titleFoldedTrgm,
  '20261129000010_post_idempotency_key': postIdempotencyKey,
  '20261129000011_post_idempotency_key_unique': postIdempotencyKeyUnique,
};
