import pg from 'pg';
import type { Bound } from './budget';
import { answerLost, errorFields } from './errors';

/**
 * The statement time-out, kept on the client side. PostgreSQL's own `statement_timeout` would
 * have to travel in the startup packet (which PgBouncer refuses), in a session `SET` (which
 * transaction pooling hands to other clients) or in a `SET LOCAL` per transaction (a round trip
 * per request); and it cannot fire at all on a server that has vanished. So each statement gets
 * a timer here: at the deadline a cancel request goes to the server (PgBouncer forwards it to the
 * server connection running the statement), which stops the statement there; if no answer comes
 * within the grace that follows, the connection is taken for dead and destroyed. Either way the
 * caller gets an error within its deadline + CANCEL_GRACE_MS, and no statement is left running.
 * Within a request the deadline is what is left of the request's database budget when that is
 * shorter (budget.ts).
 */

/** How long a cancelled statement may take to answer before its connection is taken for dead. */
export const CANCEL_GRACE_MS = 500;

/** The fields of pg's Client this needs: the cancel key and the socket (pg keeps both public). */
export interface DeadlineConnection {
  host: string;
  port: number;
  processID: number | null;
  secretKey: number | null;
  connection: { stream: { destroy(): void } };
  /** knex reads this to drop the connection instead of lending it again. */
  __knex__disposed?: unknown;
  /** The last ReadyForQuery's status: 'I' idle, 'T' inside a transaction, 'E' inside a failed one. */
  getTransactionStatus?(): string | null;
  /** pg's Client passes on the server's notices and warnings. */
  on?(event: 'notice', listener: (notice: Notice) => void): unknown;
  off?(event: 'notice', listener: (notice: Notice) => void): unknown;
}

/** The fields of a server's notice this reads: its SQLSTATE, and the server function that raised it. */
interface Notice {
  code?: string;
  routine?: string;
}

interface CancelConnection {
  stream: { destroy(): void };
  on(event: 'error', listener: () => void): void;
  once(event: 'connect', listener: () => void): void;
  connect(port: number, host: string): void;
  cancel(processID: number, secretKey: number): void;
}

/** Raised when a statement outlives its deadline; SQLSTATE 57014 (query_canceled) classifies it. */
class StatementTimeoutError extends Error {
  override name = 'StatementTimeoutError';
  readonly code = '57014';
  constructor(bound: Bound, cause: unknown) {
    super(
      `statement cancelled: it ran past its ${String(bound.ms)} ms deadline${
        bound.budgetMs === undefined
          ? ''
          : `, what was left of the request's database budget of ${String(bound.budgetMs)} ms (DB_STATEMENT_TIMEOUT_MS)`
      }`,
      { cause },
    );
  }
}

/**
 * Raised when a cancel ended a commit's wait for the synchronous standby: PostgreSQL then keeps the
 * commit on the primary alone and answers success with a warning (SQLSTATE 01000), so the change
 * may be lost in a failover and must not be acknowledged. The cancel may be this statement's
 * deadline's or anyone's: an operator's pg_cancel_backend, the server's own statement_timeout.
 */
class CommitUnconfirmedError extends Error {
  override name = 'CommitUnconfirmedError';
  constructor(bound: Bound, expired: boolean) {
    super(
      `${expired ? `statement cancelled at its ${String(bound.ms)} ms deadline` : 'statement cancelled by the server or another session'} while its commit waited for the synchronous standby: committed on the primary alone`,
    );
  }
}

/**
 * Raised when the answer to a statement that decides a change (decidesAChange) never came: the
 * server may have made the change before the connection broke, so a retry could make it twice.
 */
class ChangeInDoubtError extends Error {
  override name = 'ChangeInDoubtError';
  constructor(cause: unknown) {
    super(
      'no answer came to a statement that makes a change stand (its connection broke or went silent): the change may or may not have been made',
      { cause },
    );
  }
}

/** COMMIT, or END, its synonym: the statement that makes a transaction's changes stand. */
const COMMITS = /^\s*(commit|end)\b/i;
/** A change in the statements knex builds: a row inserted, updated or deleted, in a CTE or not. */
const CHANGES = /\b(insert\s+into|delete\s+from|merge\s+into)\b|\bupdate\s+\S+\s+set\b/i;

/**
 * True when `sql`, about to be sent on `connection`, makes a change stand once the server has run
 * it: a COMMIT, or a change outside a transaction. A change inside a transaction is undone when
 * its connection breaks before the COMMIT, so losing its answer loses nothing.
 */
export function decidesAChange(sql: string, connection: DeadlineConnection): boolean {
  if (COMMITS.test(sql)) return true;
  return connection.getTransactionStatus?.() === 'I' && CHANGES.test(sql);
}

/**
 * Sends a CancelRequest for the connection's current statement over a connection of its own.
 * Sent in the clear, as libpq before PostgreSQL 17 does: the server and PgBouncer accept a cancel
 * before any TLS or authentication. Given up after `graceMs`, so a vanished host holds nothing.
 */
function sendCancel(target: DeadlineConnection, graceMs: number): void {
  if (target.processID === null || target.secretKey === null) return;
  const { processID, secretKey } = target;
  // pg's protocol connection; its typings leave out connect and cancel, both part of its API.
  const con = new pg.Connection() as unknown as CancelConnection;
  // A refused or reset cancel changes nothing: the grace timer decides what happens next.
  con.on('error', () => undefined);
  con.once('connect', () => {
    con.cancel(processID, secretKey);
  });
  con.connect(target.port, target.host);
  setTimeout(() => {
    con.stream.destroy();
  }, graceMs).unref();
}

/**
 * Settles like `work`, a statement running on `connection`, but by `bound.ms + graceMs` at the
 * latest: at `bound.ms` the statement is cancelled on the server; if it has not answered `graceMs`
 * later, the connection is destroyed, which fails the statement. A connection whose deadline fired
 * is never lent again: a late cancel could otherwise stop the next statement run on it. When the
 * statement `decides` a change (decidesAChange) and its answer is lost, the error says the change
 * is in doubt rather than that the database is away.
 */
export async function withDeadline<T>(
  connection: DeadlineConnection,
  work: Promise<T>,
  bound: Bound,
  { graceMs = CANCEL_GRACE_MS, decides = false }: { graceMs?: number; decides?: boolean } = {},
): Promise<T> {
  // An object, as the timer and the listener set it where the compiler's flow analysis does not look.
  const state = { expired: false, unconfirmed: false };
  // The only warning a cancel draws from a statement that then succeeds is the ended replication
  // wait: after this deadline's cancel, any; on a statement that decides a change, the wait's own
  // (its routine names it), whoever cancelled it, as a plain warning has the same SQLSTATE.
  const warned = (notice: Notice) => {
    if (notice.code !== '01000') return;
    if (state.expired || (decides && notice.routine === 'SyncRepWaitForLSN')) state.unconfirmed = true;
  };
  connection.on?.('notice', warned);
  let again: NodeJS.Timeout | undefined;
  let grace: NodeJS.Timeout | undefined;
  const deadline = setTimeout(() => {
    state.expired = true;
    connection.__knex__disposed ??= new Error('statement deadline passed');
    // Given its time even when the connection goes at once (no grace): the server goes on with a
    // statement whose client has gone until it next writes to it.
    sendCancel(connection, Math.max(graceMs, CANCEL_GRACE_MS));
    // The server ignores a cancel that reaches it before the statement does (a short deadline on a
    // loaded host); a second one halfway through the grace stops a statement that started since,
    // rather than leaving it running behind a destroyed connection.
    again = setTimeout(() => {
      sendCancel(connection, graceMs / 2);
    }, graceMs / 2);
    grace = setTimeout(() => {
      connection.connection.stream.destroy();
    }, graceMs);
  }, bound.ms);
  let result: T;
  try {
    result = await work;
  } catch (error) {
    // An answer the server gave anyway (a unique violation that beat the cancel, say) stands.
    const { code } = errorFields(error);
    // Without an answer (the grace ran out, the connection broke) the server may have acted on it.
    if (decides && ((state.expired && code === undefined) || answerLost(error)))
      throw new ChangeInDoubtError(error);
    throw state.expired && (code === undefined || code === '57014')
      ? new StatementTimeoutError(bound, error)
      : error;
  } finally {
    clearTimeout(deadline);
    clearTimeout(again);
    clearTimeout(grace);
    connection.off?.('notice', warned);
  }
  if (state.unconfirmed) throw new CommitUnconfirmedError(bound, state.expired);
  // The cancel sent at the deadline may still be on its way and would land on the transaction's next
  // statement, its COMMIT's wait for a synchronous standby among them: the transaction ends here.
  if (state.expired && !decides && connection.getTransactionStatus?.() === 'T')
    throw new StatementTimeoutError(bound, undefined);
  return result;
}
