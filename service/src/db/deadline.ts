import pg from 'pg';
import type { Bound } from './budget';
import { errorFields } from './errors';

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
  /** pg's Client passes on the server's notices and warnings. */
  on?(event: 'notice', listener: (notice: { code?: string }) => void): unknown;
  off?(event: 'notice', listener: (notice: { code?: string }) => void): unknown;
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
 * may be lost in a failover and must not be acknowledged.
 */
class CommitUnconfirmedError extends Error {
  override name = 'CommitUnconfirmedError';
  constructor(bound: Bound) {
    super(
      `statement cancelled at its ${String(bound.ms)} ms deadline while its commit waited for the synchronous standby: committed on the primary alone`,
    );
  }
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
 * is never lent again: a late cancel could otherwise stop the next statement run on it.
 */
export async function withDeadline<T>(
  connection: DeadlineConnection,
  work: Promise<T>,
  bound: Bound,
  graceMs = CANCEL_GRACE_MS,
): Promise<T> {
  // An object, as the timer and the listener set it where the compiler's flow analysis does not look.
  const state = { expired: false, unconfirmed: false };
  // The only warning a cancel draws from a statement that then succeeds: the ended replication wait.
  const warned = (notice: { code?: string }) => {
    if (state.expired && notice.code === '01000') state.unconfirmed = true;
  };
  connection.on?.('notice', warned);
  let again: NodeJS.Timeout | undefined;
  let grace: NodeJS.Timeout | undefined;
  const deadline = setTimeout(() => {
    state.expired = true;
    connection.__knex__disposed ??= new Error('statement deadline passed');
    sendCancel(connection, graceMs);
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
    throw state.expired && (code === undefined || code === '57014')
      ? new StatementTimeoutError(bound, error)
      : error;
  } finally {
    clearTimeout(deadline);
    clearTimeout(again);
    clearTimeout(grace);
    connection.off?.('notice', warned);
  }
  if (state.unconfirmed) throw new CommitUnconfirmedError(bound);
  return result;
}
