import { STATUS_CODES } from 'node:http';
import type { ErrorRequestHandler, RequestHandler, Response } from 'express';
import { errorFields, errorWithHint, isDatabaseUnavailable } from '../db/errors';
import type { Logger } from '../logger';

/** The one error type the service throws on purpose; it becomes a problem+json answer. */
export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail);
  }
}

export const notAuthenticated = (detail: string): ApiError =>
  new ApiError(401, detail, {}, { 'WWW-Authenticate': 'Bearer' });

/** A post missing, or another user's draft: the two are answered alike, by posts and by votes. */
export const postNotFound = (id: number): ApiError => new ApiError(404, `post with id: ${id} was not found`);

/** RFC 9457 problem details; `detail` is always present because clients read it. */
export function problemBody(
  status: number,
  detail: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return { type: 'about:blank', title: STATUS_CODES[status] ?? 'Error', status, detail, ...extra };
}

export function sendProblem(res: Response, error: ApiError): void {
  res.status(error.status);
  res.set(error.headers);
  res.type('application/problem+json');
  res.send(JSON.stringify(problemBody(error.status, error.detail, error.extra)));
}

export const databaseUnavailable = new ApiError(
  503,
  'The database is not available right now; try again shortly',
  {},
  { 'Retry-After': '1' },
);

function toApiError(error: unknown): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (errorFields(error).name === 'URIError')
    return new ApiError(400, 'The request path is not validly percent-encoded');
  if (isDatabaseUnavailable(error)) return databaseUnavailable;
  return undefined;
}

/** The last middleware: every error leaves as problem+json, never a stack or a library message. */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error: unknown, req, res, _next) => {
    const known = toApiError(error);
    if (!known || known.status >= 500) {
      logger.error({ ...errorWithHint(error), reqId: req.id }, 'request failed');
    }
    if (res.headersSent) {
      // Part of the answer is already out; ending the socket is the only honest signal left.
      res.destroy();
      return;
    }
    sendProblem(res, known ?? new ApiError(500, 'The server could not complete the request'));
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
