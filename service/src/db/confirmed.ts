import type { Knex } from 'knex';
import type { Database } from './connection';

/**
 * Runs `read`, which locks the rows it reads (FOR KEY SHARE), in a transaction of its own, for an
 * answer that says a change already stands (a retried post, an address taken): the request that
 * made it may have committed on the primary alone (a cancel ended its commit's wait for the
 * synchronous standby), and a failover would lose it. The lock writes to the WAL, so the COMMIT
 * waits for the standby to confirm the WAL up to it, that change included, and answers that it may
 * or may not stand (503) when the standby does not. Only a COMMIT's ended wait is told apart
 * (deadline.ts): a locked read outside a transaction would wait as long and be answered 2xx.
 */
export function readConfirmed<T>(db: Database, read: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return db.knex.transaction(read);
}

/**
 * Waits until the synchronous standby has all the primary has committed so far, for an answer that
 * something is gone (a post deleted, a vote withdrawn) or that an account stands: the change, this
 * caller's own retried, may have stood on the primary alone. It locks the caller's own user row in
 * a transaction of its own, which writes to the WAL, as readConfirmed's reads do. False when that
 * row is gone: nothing was locked, so nothing was confirmed.
 */
export async function confirmSoFar(db: Database, userId: number): Promise<boolean> {
  const rows = await readConfirmed(db, (trx) => trx('users').select('id').where('id', userId).forKeyShare());
  return rows.length > 0;
}
