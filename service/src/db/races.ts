import { setTimeout as sleep } from 'node:timers/promises';
import { errorFields } from './errors';

/**
 * Races between writers that PostgreSQL settles by failing one of them: a serialization failure
 * (40001) or a deadlock (40P01). The loser's statement or transaction changed nothing, so running
 * it again is safe; the request's database budget (budget.ts) still bounds every try.
 */
const RACE_CODES = new Set(['40001', '40P01']);

/** How many times a write is tried in all before its race is answered 503. */
const TRIES = 3;

export function isWriteRace(error: unknown): boolean {
  const { code } = errorFields(error);
  return code !== undefined && RACE_CODES.has(code);
}

/**
 * Runs `work` (one statement outside a transaction, or a whole transaction) again when it lost a
 * race, after a short random pause so the two writers do not meet again in step. The last race
 * is thrown for the error handler to answer 503 with Retry-After.
 */
export async function retryingRaces<T>(work: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (!isWriteRace(error) || attempt >= TRIES) throw error;
      await sleep(attempt * (5 + Math.random() * 20));
    }
  }
}
