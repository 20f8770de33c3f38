import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * A request's database budget: its waits for a pooled connection and its statements together get
 * at most DB_STATEMENT_TIMEOUT_MS (plus the cancel grace of a statement being cancelled), however
 * many statements it runs. Without it a request could wait for a connection, then run a statement
 * to its deadline, then do both again: answers of several times the statement time-out while the
 * pool is held by statements queued behind a lock.
 *
 * The clock starts when the request first asks the database, not when it arrives: the time before
 * (reading the body, checking the token) is the client's and this process's, and a slow upload
 * must not turn into a 503 that blames the database. Work outside a request (migrations, probes,
 * scrapes, start-up) has no budget and keeps the per-statement deadline alone.
 */
class RequestBudget {
  private endsAt: number | undefined;

  constructor(readonly ms: number) {}

  /** The ms left, starting the clock on the first call. */
  left(): number {
    this.endsAt ??= performance.now() + this.ms;
    return this.endsAt - performance.now();
  }
}

const current = new AsyncLocalStorage<RequestBudget>();

/** Runs `work` (an HTTP request's handling) with a database budget of `ms`. */
export function withRequestBudget<T>(ms: number, work: () => T): T {
  return current.run(new RequestBudget(ms), work);
}

/** Raised when a request's database budget runs out before it got a connection or sent a statement. */
export class RequestBudgetError extends Error {
  override name = 'RequestBudgetError';
  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
  }
}

/** What bounds one wait or one statement: `ms`, and the request's budget when that is what set it. */
export interface Bound {
  ms: number;
  budgetMs?: number;
}

/**
 * The bound for a wait or a statement whose own limit is `limitMs`: the smaller of it and what is
 * left of the request's budget. Throws RequestBudgetError, naming `what`, when nothing is left.
 */
export function boundBy(limitMs: number, what: string): Bound {
  const budget = current.getStore();
  if (!budget) return { ms: limitMs };
  const left = Math.floor(budget.left());
  if (left <= 0)
    throw new RequestBudgetError(
      `${what}: the request's database budget of ${String(budget.ms)} ms (DB_STATEMENT_TIMEOUT_MS) was spent`,
    );
  return left < limitMs ? { ms: left, budgetMs: budget.ms } : { ms: limitMs };
}
