import { setTimeout as sleep } from 'node:timers/promises';
import type { Knex } from 'knex';

// Any fixed number works; it only has to be the same in every replica of this service.
const EXCLUSIVE_LOCK_KEY = 7_262_017_450;

/**
 * Runs `work` inside a transaction that holds a transaction-level advisory lock, so no two
 * processes sharing the database run it at once. A transaction-level lock, not a session one:
 * behind a pooler in transaction mode a session lock stays on whichever server connection took
 * it, and its unlock runs on another (Flyway takes the same way). Each try is a short transaction
 * of its own, so a waiting process pins no server connection between tries. The lock goes with
 * the transaction: committed, rolled back, or its holder's connection gone.
 */
export async function withAdvisoryLock<T>(
  knex: Knex,
  work: (trx: Knex.Transaction) => Promise<T>,
  waitMs: number,
  onWait?: () => void,
): Promise<T> {
  const deadline = Date.now() + waitMs;
  for (let attempt = 0; ; attempt++) {
    const trx = await knex.transaction();
    try {
      const { rows } = await trx.raw<{ rows: { locked: boolean }[] }>(
        'SELECT pg_try_advisory_xact_lock(?) AS locked',
        [EXCLUSIVE_LOCK_KEY],
      );
      if (rows[0]?.locked) {
        const result = await work(trx);
        await trx.commit();
        return result;
      }
      await trx.rollback();
    } catch (error) {
      if (!trx.isCompleted()) await trx.rollback().catch(() => undefined);
      throw error;
    }
    if (Date.now() > deadline) throw new Error('timed out waiting for another replica to finish migrating');
    if (attempt === 0) onWait?.();
    await sleep(100 + Math.random() * 200);
  }
}
