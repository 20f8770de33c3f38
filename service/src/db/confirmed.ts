import type { Knex } from 'knex';
import type { Database } from './connection';

/**
 * Runs `read`, which locks the rows it reads (FOR KEY SHARE), in a transaction of its own, for an
 * answer that says a change already stands (a retried post, an address taken): the
 * request that made it may have committed on the primary alone (a cancel ended its commit's wait
 * for the synchronous standby), and a failover would lose it. The lock writes to the WAL, so this
 * COMMIT waits for the standby to confirm the WAL up to it, that change included, and answers that
 * it may or may not stand (503) when the standby does not.
 */
export function readConfirmed<T>(db: Database, read: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return db.knex.transaction(read);
}
