import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * A request's database budget: its waits for a pooled connection and its statements together get
 * at most DB_STATEMENT_TIMEOUT_MS (plus the cancel grace of a statement being cancelled), however
 * many statements it runs. Without it a request could wait for a connection, then run a statement
 * to its deadline, then do both again: answers of several times the statement time-out while the
 * pool is held by statements queued behind a lock.
 *
 * Only the time the request spends on the database counts (the union of its waits and statements,
 * so two at once count once), not the time between: reading the body, checking a password, a slow
 * upload after the caller's user was looked up are the client's and this process's, and must not
 * turn into a 503 that blames the database. Work outside a request (migrations, probes, scrapes,
 * start-up) has no budget and keeps the per-statement deadline alone.
 */
class RequestBudget {
  private spentMs = 0;
  /** Waits and statements of the request under way now, and since when one has been. */
  private active = 0;
  private since = 0;

  /** A share's time is the request's too: `parent` is the budget it was carved from. */
  constructor(
    readonly ms: number,
    private readonly parent?: RequestBudget,
  ) {}

  left(): number {
    const running = this.active > 0 ? performance.now() - this.since : 0;
    return Math.min(this.ms - this.spentMs - running, this.parent?.left() ?? Infinity);
  }

  start(): void {
    if (this.active++ === 0) this.since = performance.now();
    this.parent?.start();
  }

  stop(): void {
    if (--this.active === 0) this.spentMs += performance.now() - this.since;
    this.parent?.stop();
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
 * Less than this left counts as none: a statement sent with less would be cancelled about as soon
 * as it reached the server, where the cancel can overtake it, and a wait that short could only
 * lend a connection to a statement refused at once.
 */
const SMALLEST_BOUND_MS = 100;

/**
 * Runs `work` with `share` (0 to 1) of what is left of the request's budget, its time counted
 * against the request's as well: what comes after it keeps the rest. Never less than twice the
 * smallest bound (or all that is left): a share too short to wait for a connection and send a
 * statement would refuse `work` every time. Outside a request, `work` as is.
 */
export function withBudgetShare<T>(share: number, work: () => Promise<T>): Promise<T> {
  const budget = current.getStore();
  if (!budget) return work();
  const left = budget.left();
  const ms = Math.max(Math.floor(left * share), Math.min(Math.floor(left), 2 * SMALLEST_BOUND_MS));
  return current.run(new RequestBudget(ms, budget), work);
}

/**
 * Runs `work`, a wait or a statement whose own limit is `limitMs`, under the smaller of that limit
 * and what is left of the request's budget, and counts its time against the budget. Rejects with
 * RequestBudgetError, naming `what`, without running it when nothing is left.
 */
export async function withinBudget<T>(
  limitMs: number,
  what: string,
  work: (bound: Bound) => Promise<T>,
): Promise<T> {
  const budget = current.getStore();
  if (!budget) return work({ ms: limitMs });
  const left = Math.floor(budget.left());
  if (left < SMALLEST_BOUND_MS)
    throw new RequestBudgetError(
      `${what}: the request's database budget of ${String(budget.ms)} ms (DB_STATEMENT_TIMEOUT_MS) was spent`,
    );
  budget.start();
  try {
    return await work(left < limitMs ? { ms: left, budgetMs: budget.ms } : { ms: limitMs });
  } finally {
    budget.stop();
  }
}
