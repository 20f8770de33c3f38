import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import {
  errorFields,
  errorWithHint,
  isDatabaseUnavailable,
  isLoginRefused,
  isUnconfirmed,
} from '../db/errors';
import { isWriteRace } from '../db/races';
import type { Logger } from '../logger';

/** The one error type the service throws on purpose; it becomes a problem+json answer. */
export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
    /** What the database threw, when this answer stands for it: logged in its place. */
    cause?: unknown,
  ) {
    super(detail, cause === undefined ? undefined : { cause });
  }
}

export const notAuthenticated = (detail: string): ApiError =>
  new ApiError(401, detail, {}, { 'WWW-Authenticate': 'Bearer' });

/**
 * A post missing, or another user's draft: the two are answered alike, by posts and by votes.
 * `id` may be the path's text, which a number rounds past the safe integers; a whole number is
 * written out in digits, never as `1e+21`.
 */
export const postNotFound = (id: number | string): ApiError =>
  new ApiError(
    404,
    `post with id: ${typeof id === 'number' && Number.isInteger(id) ? BigInt(id).toString() : String(id)} was not found`,
  );

/** What an error answer says: an ApiError, or a bare status and detail. */
export interface Problem {
  status: number;
  detail: string;
  extra?: Record<string, unknown>;
  headers?: Record<string, string>;
}

/**
 * A problem+json answer (RFC 9457; `detail` is always present because clients read it): its
 * headers and body. With `close` the connection ends after it.
 */
function problemAnswer(
  { status, detail, extra = {}, headers = {} }: Problem,
  close: boolean,
): { headers: Record<string, string>; body: string } {
  const body = JSON.stringify({
    type: 'about:blank',
    title: STATUS_CODES[status] ?? 'Error',
    status,
    detail,
    ...extra,
  });
  return {
    headers: {
      ...headers,
      'Content-Type': 'application/problem+json',
      'Content-Length': String(Buffer.byteLength(body)),
      ...(close ? { Connection: 'close' } : {}),
    },
    body,
  };
}

/**
 * Writes a problem+json answer, the app's and the server's alike (an Express response is one too).
 * With `close` the connection ends after it; without, Node reads off any body and keeps it.
 */
export function writeProblem(res: ServerResponse, problem: Problem, { close }: { close: boolean }): void {
  const { headers, body } = problemAnswer(problem, close);
  res.writeHead(problem.status, headers);
  res.end(body);
}

/** The same answer as bytes for a socket, for errors raised before a response exists; it closes. */
export function rawProblem(problem: Problem): string {
  const { headers, body } = problemAnswer(problem, true);
  const head = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status] ?? ''}\r\n${head}\r\n${body}`;
}

const databaseUnavailable = new ApiError(
  503,
  'The database is not available right now; try again shortly',
  {},
  { 'Retry-After': '1' },
);

/** A race between writers that its tries did not settle within the request (db/races.ts). */
const writeRace = new ApiError(
  503,
  'The change met a simultaneous change to the same data and did not go through; try again',
  {},
  { 'Retry-After': '1' },
);

/**
 * A change whose fate the service cannot know (db/deadline.ts): its answer was lost after the
 * server took it, or its commit is on the primary alone, its synchronous standby silent.
 */
const changeUnconfirmed = new ApiError(
  503,
  'The database did not confirm the change, so it may or may not stand; read it back before trying again',
  {},
  { 'Retry-After': '1' },
);

function toApiError(error: unknown): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (isUnconfirmed(error)) return changeUnconfirmed;
  if (errorFields(error).name === 'URIError')
    return new ApiError(400, 'The request path is not validly percent-encoded');
  if (isDatabaseUnavailable(error) || isLoginRefused(error)) return databaseUnavailable;
  if (isWriteRace(error)) return writeRace;
  return undefined;
}

/** The last middleware: every error leaves as problem+json, never a stack or a library message. */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error: unknown, req, res, _next) => {
    const known = toApiError(error);
    if (!known || known.status >= 500) {
      const logged = error instanceof ApiError && error.cause !== undefined ? error.cause : error;
      logger.error({ ...errorWithHint(logged), reqId: req.id }, 'request failed');
    }
    if (res.headersSent) {
      // Part of the answer is already out; ending the socket is the only honest signal left.
      res.destroy();
      return;
    }
    writeProblem(res, known ?? new ApiError(500, 'The server could not complete the request'), {
      close: false,
    });
  };
}

export const notFound: RequestHandler = (req, _res, next) => {
  next(new ApiError(404, `No route for ${req.method} ${req.path}`));
};

/** For a known path called with a method it does not serve. */
export function methodNotAllowed(allowed: string[]): RequestHandler {
  return (req, _res, next) => {
    next(
      new ApiError(
        405,
        `${req.method} is not allowed here; use ${allowed.join(', ')}`,
        {},
        { Allow: allowed.join(', ') },
      ),
    );
  };
}
