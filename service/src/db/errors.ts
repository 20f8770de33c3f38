/** Classifying what the database (or its driver) threw. */

/**
 * The code and message of anything thrown. Driver errors come from Node's own realm, where
 * `instanceof Error` can be false (under jest's sandbox, for one), so fields are read directly.
 */
export function errorFields(error: unknown): { name: string; code: string | undefined; message: string } {
  if (typeof error !== 'object' || error === null)
    return { name: '', code: undefined, message: String(error) };
  const { name, code, message } = error as { name?: unknown; code?: unknown; message?: unknown };
  return {
    name: typeof name === 'string' ? name : '',
    code: typeof code === 'string' ? code : undefined,
    message: typeof message === 'string' ? message : '',
  };
}

/**
 * The constraint or index a statement broke, by the name pg and PGlite both report: a foreign key
 * for `23503`, a unique index for `23505`; undefined for any other error.
 */
export function brokenConstraint(error: unknown, code: '23503' | '23505'): string | undefined {
  if (errorFields(error).code !== code) return undefined;
  const { constraint } = error as { constraint?: unknown };
  return typeof constraint === 'string' ? constraint : undefined;
}

const UNAVAILABLE_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * True when a statement's answer was lost rather than given: the connection broke, or the server
 * shut down, while the statement ran, so what it asked may or may not have been done. pg's "not
 * queryable" errors are not among them: those statements were never sent.
 */
export function answerLost(error: unknown): boolean {
  const { code, message } = errorFields(error);
  // An administrator's or a crash's shutdown ends a backend even after its commit is written; a
  // pooler reports its server connection broken as a connection exception (PgBouncer: 08P01).
  if (code === '57P01' || code === '57P02' || code?.startsWith('08')) return true;
  if (code !== undefined) return UNAVAILABLE_ERRNO.has(code);
  // knex puts the statement before pg's message.
  return message.includes('Connection terminated');
}

/**
 * Node's codes for a server certificate refused during the TLS handshake: its chain (not to
 * DB_SSL_CA_FILE, or the public roots without it), its dates, or its names (not DB_HOSTNAME).
 * A running service meets them when the server's certificate changes under it, e.g. a CA renewed
 * on the server before the pod's mounted CA file follows.
 */
const CERTIFICATE_REFUSED = new Set([
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
]);

/** pg's message when DB_SSL asks for TLS and the server offers none. */
const NO_TLS = 'The server does not support SSL connections';

/**
 * True for errors that mean the database is away or overloaded rather than that the query was
 * wrong: these answer 503 so clients and probes can tell "try again" from a bug.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  const { name, code, message } = errorFields(error);
  // No pooled connection in time (the pool's own wait, or the request's database budget).
  if (name === 'KnexTimeoutError' || name === 'RequestBudgetError') return true;
  // A connection lost mid-change (deadline.ts): the client is told more, a retried migration is safe.
  if (name === 'ChangeInDoubtError') return true;
  // The embedded database failed (a PANIC, its WAL not written) and is asked nothing more (embedded.ts).
  if (name === 'EmbeddedFailure') return true;
  if (code !== undefined) {
    if (UNAVAILABLE_ERRNO.has(code)) return true;
    // No database this process may trust: the client can only retry; the operator is told (operatorHint).
    if (CERTIFICATE_REFUSED.has(code)) return true;
    // SQLSTATE classes: 08 connection exception, 53 insufficient resources, 57 operator
    // intervention (57014 is a statement time-out, 57P01 an administrator shutdown).
    if (/^(08|53|57)[0-9A-Z]{3}$/.test(code)) return true;
    // A write reached a standby: during a failover, until the new primary is at the address.
    if (code === '25006') return true;
  }
  // "timeout expired" is pg's connect time-out (connectionTimeoutMillis): a host that accepts
  // nothing, or a node gone mid-handshake. A server without TLS under DB_SSL=true is no database
  // this process may use either (operatorHint says what to change).
  return (
    message === 'timeout expired' ||
    message === NO_TLS ||
    /Connection terminated|connection timeout|Client has encountered a connection error|PGlite is closed|Unable to acquire a connection/i.test(
      message,
    )
  );
}

/** deadline.ts's errors for a change whose fate is unknown: a commit on the primary alone, an answer lost. */
const UNCONFIRMED = new Set(['CommitUnconfirmedError', 'ChangeInDoubtError']);

/** True when the database may or may not keep what a statement did (db/deadline.ts). */
export const isUnconfirmed = (error: unknown): boolean => UNCONFIRMED.has(errorFields(error).name);

/** A server that refuses this service's login (28000, 28P01) or has no DB_NAME (3D000): its settings. */
const LOGIN_REFUSED = new Set(['28000', '28P01', '3D000']);

/**
 * True when a connection opened while serving was refused its login or database: a password
 * rotated on the server, a database dropped. No query was wrong, and the database is not there for
 * this service: a request answers 503, as for a database that is away. At start-up these stop the
 * start at once instead (startup.ts), as no retry would change them.
 */
export function isLoginRefused(error: unknown): boolean {
  const { code } = errorFields(error);
  return code !== undefined && LOGIN_REFUSED.has(code);
}

/**
 * What an operator should change, for errors that mean the set-up rather than the query is wrong;
 * logged beside the error. 42P05 and 26000 are a named statement met twice or not at all: a
 * pooler in transaction mode moved the connection to another server connection without
 * tracking what had been prepared on it.
 */
export function operatorHint(error: unknown): string | undefined {
  const { code, name } = errorFields(error);
  if (name === 'CommitUnconfirmedError')
    return 'no synchronous standby confirmed the commit within DB_STATEMENT_TIMEOUT_MS: writes wait for one, so bring a standby back (or change the synchronous replication settings)';
  if (code === '42P05' || code === '26000')
    return 'a pooler in transaction mode does not track prepared statements: set DB_PREPARED_STATEMENTS=false, or max_prepared_statements above 0 on PgBouncer >= 1.21';
  if (isLoginRefused(error))
    return 'the database refused the login of DB_USERNAME, or has no DB_NAME: check DB_USERNAME, DB_PASSWORD and DB_NAME against the server (a password changed there reaches the service when it restarts)';
  if (errorFields(error).message === NO_TLS)
    return 'DB_SSL=true but the server offers no TLS: turn ssl on at the server (or the pooler), or set DB_SSL=false';
  if (code !== undefined && CERTIFICATE_REFUSED.has(code))
    return "the database server's TLS certificate was refused: it must chain to DB_SSL_CA_FILE (the public roots when unset) and name DB_HOSTNAME";
  return undefined;
}

/** A log line's fields for a failed database call: the error and, when there is one, the hint. */
export function errorWithHint(error: unknown): { err: unknown; hint?: string } {
  const hint = operatorHint(error);
  return hint ? { err: error, hint } : { err: error };
}
