import { BODY_LIMIT_TEXT, BODY_TOO_LARGE } from '../http/body';
import type { OpenApiSchema } from './request-schemas';

const problem = (example: Record<string, unknown>) => ({
  'application/problem+json': {
    schema: { $ref: '#/components/schemas/Problem' },
    example: { type: 'about:blank', ...example },
  },
});
const response = (description: string, status: number, title: string, detail: string) => ({
  description,
  content: problem({ title, status, detail }),
});

/** The shape of every error answer (`#/components/schemas/Problem`). */
export const PROBLEM_SCHEMA: OpenApiSchema = {
  type: 'object',
  description: 'RFC 9457 problem details.',
  required: ['type', 'title', 'status', 'detail'],
  properties: {
    type: { type: 'string', example: 'about:blank' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    errors: {
      type: 'array',
      description: 'On 422 only: one entry per invalid field.',
      items: {
        type: 'object',
        required: ['field', 'message'],
        properties: { field: { type: 'string' }, message: { type: 'string' } },
      },
    },
  },
};

/** The answers routes share, which their `@openapi` comments name as `#/components/responses/…`. */
export const SHARED_RESPONSES = {
  BadRequest: response(
    'The body is not valid JSON, does not decompress as its Content-Encoding says or is cut short, or the path is badly percent-encoded.',
    400,
    'Bad Request',
    'The request body is not valid JSON',
  ),
  NotModified: {
    description: 'The answer is unchanged since the `ETag` the request repeats in `If-None-Match`: no body.',
  },
  Unauthorized: {
    description:
      'No token (`Not authenticated`), or a bad, expired or foreign-signed token, one whose claims are missing or out of range, or its user is gone (`Could not validate credentials`).',
    headers: { 'WWW-Authenticate': { schema: { type: 'string', example: 'Bearer' } } },
    content: problem({ title: 'Unauthorized', status: 401, detail: 'Not authenticated' }),
  },
  InvalidCredentials: response(
    'Unknown e-mail or wrong password (one answer for both).',
    403,
    'Forbidden',
    'Invalid Credentials',
  ),
  Forbidden: response(
    'The post belongs to another user.',
    403,
    'Forbidden',
    'Not authorized to perform requested action',
  ),
  NotFound: response(
    "No such post, or another user's draft.",
    404,
    'Not Found',
    'post with id: 9 was not found',
  ),
  PreconditionFailed: response(
    "`If-Match` names no current version of the post (it changed since the client read it, or the value is not `*` or a list of entity-tags), or `If-None-Match` is `*`, names the current version or cannot be read; nothing was changed. Read the post again (GET) and send that answer's `ETag`.",
    412,
    'Precondition Failed',
    "The post is not the one If-Match names, or is one If-None-Match names: read it again (GET) and use that answer's ETag",
  ),
  Conflict: response(
    'Already exists (a second vote, a taken e-mail).',
    409,
    'Conflict',
    'user 1 has already voted on post 7',
  ),
  PayloadTooLarge: response(
    `The body is over ${BODY_LIMIT_TEXT} (after decompression), or its declared Content-Length is: then at once, before the body is read, and the connection closes.`,
    413,
    'Payload Too Large',
    BODY_TOO_LARGE,
  ),
  UnsupportedMediaType: response(
    'The body has the wrong Content-Type, a charset other than UTF-8, or an unsupported Content-Encoding.',
    415,
    'Unsupported Media Type',
    'The request body must be application/json',
  ),
  ValidationError: {
    description:
      'Invalid fields; `errors` lists each. A JSON body that is not an object (`null`, `"x"`, `42`, `[]`) is refused as a whole (`field`: `body`).',
    content: problem({
      title: 'Unprocessable Entity',
      status: 422,
      detail: 'Invalid body: title is required',
      errors: [{ field: 'title', message: 'title is required' }],
    }),
  },
  ListValidationError: {
    description:
      'Invalid query fields; `errors` lists each: `limit` or `skip` out of range (`skip` is at most 10000: the cursor pages deeper), a `cursor` this service did not write (altered, truncated, over 64 characters), or `cursor` together with `skip` (even `skip=0`).',
    content: problem({
      title: 'Unprocessable Entity',
      status: 422,
      detail:
        'Invalid query: skip cannot be combined with cursor; a cursor page starts where the cursor points',
      errors: [
        {
          field: 'skip',
          message: 'skip cannot be combined with cursor; a cursor page starts where the cursor points',
        },
      ],
    }),
  },
  TooManyRequests: {
    description:
      'Sent by the proxy, not the service: over 10 requests a minute from one address to `/login` and `/users/` together.',
  },
  ServiceUnavailable: response(
    'The database did not answer, or (lists) too many searches no index serves are running on this replica; retry after `Retry-After` seconds. A write answered so did not happen, unless `detail` says the change may or may not stand (the database took it but its answer was lost, or a synchronous standby did not confirm its commit in time): read it back before retrying.',
    503,
    'Service Unavailable',
    'The database is not available right now; try again shortly',
  ),
};
