import path from 'node:path';
import { Router, type RequestHandler } from 'express';
import swaggerJsdoc from 'swagger-jsdoc';
import swaggerUi from 'swagger-ui-express';
import { requestComponents as generateRequestComponents } from './request-schemas';
import { exactRouter } from './router';
import { pageHeaders } from './security-headers';

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

const requestComponents = generateRequestComponents();

/** The parts every route shares; each route's own part sits in a comment beside it. */
const definition = {
  openapi: '3.0.3',
  info: {
    title: 'Social Posts API',
    version: '1.0.0',
    description: [
      'Register, log in for a bearer token, write posts, vote, read the public feed.',
      '',
      'Press **Authorize** and log in with your e-mail as `username` (OAuth2 password flow, form POST to `/login`), then try any call.',
      '',
      'Every error is `application/problem+json` with `detail`. A request without a valid token is answered 401 before its body is read.',
      'Cross-origin calls are allowed only from the configured origins (`CORS_ALLOWED_ORIGINS`); every answer carries `Vary: Origin` because it depends on the origin.',
      'No cookies are ever set.',
      '',
      '**Bodies**: JSON endpoints read `application/json`, `/login` reads `application/x-www-form-urlencoded`, both in UTF-8 only (a `charset` other than `utf-8` is 415), at most 100 kB after decompression. `Content-Encoding` may be `gzip`, `deflate` or `br` (one at most; anything else 415; a body that does not decompress 400). A declared `Content-Length` over 100 kB is 413 before the body is read (and any answer to such a request closes the connection), and `Expect: 100-continue` is answered `100 Continue` only when the body is about to be read; any other `Expect` is 417. A request without `Host`, or with two, is 400.',
      '',
      '**Tokens** are HS256 JWTs whose header `kid` names the key that signed them (a token naming a key the service does not accept is 401). They must carry numeric `exp` (in the future) and `iat` (at most 30 s ahead: the clock skew allowed), with `exp - iat` at most ACCESS_TOKEN_EXPIRE_MINUTES; `nbf`, if present, not in the future; no `iss`, `aud` or `jti`. Otherwise 401.',
      '',
      '**E-mail addresses** are normalised (Unicode NFKC; domain per UTS #46) before the uniqueness check and at login; invisible or formatting characters and a local part or domain label mixing scripts are 422.',
      '',
      '**CSRF**: credentials travel only in the `Authorization` header, never in a cookie; JSON endpoints refuse the content types a cross-site form can send (415, or 401 first without a token); `/login` returns its token only in the response body, which a foreign origin cannot read. There is no CSRF token, by design.',
    ].join('\n'),
  },
  tags: [
    { name: 'Users' },
    { name: 'Authentication' },
    { name: 'Posts' },
    { name: 'Votes' },
    { name: 'Health' },
  ],
  components: {
    securitySchemes: {
      bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
      oauth2Password: { type: 'oauth2', flows: { password: { tokenUrl: '/login', scopes: {} } } },
    },
    // Request bodies and parameters are generated from their joi schemas (requestComponents).
    parameters: requestComponents.parameters,
    schemas: {
      ...requestComponents.schemas,
      User: {
        type: 'object',
        required: ['id', 'email', 'created_at'],
        properties: {
          id: { type: 'integer', example: 1 },
          email: { type: 'string', format: 'email', example: 'a@b.io' },
          created_at: { type: 'string', format: 'date-time' },
        },
      },
      Token: {
        type: 'object',
        required: ['access_token', 'token_type'],
        properties: {
          access_token: {
            type: 'string',
            description:
              'HS256 JWT; header `kid` is the id of the signing key (derived from it, not secret), `sub` the user id, `exp` ACCESS_TOKEN_EXPIRE_MINUTES later.',
          },
          token_type: { type: 'string', enum: ['bearer'] },
        },
      },
      Post: {
        type: 'object',
        required: ['id', 'title', 'content', 'published', 'created_at', 'user_id', 'owner', 'votes'],
        properties: {
          id: { type: 'integer', example: 7 },
          title: { type: 'string' },
          content: { type: 'string' },
          published: { type: 'boolean' },
          created_at: { type: 'string', format: 'date-time' },
          user_id: { type: 'integer' },
          owner: { $ref: '#/components/schemas/User' },
          votes: { type: 'integer', minimum: 0, description: 'Total votes on the post.' },
        },
      },
      Message: { type: 'object', required: ['message'], properties: { message: { type: 'string' } } },
      Problem: {
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
      },
    },
    headers: {
      NextLink: {
        description:
          'RFC 8288, only when more posts follow this page: `</posts/public?limit=20&search=hello&cursor=…>; rel="next"`. The path is the one requested; `limit` and `search` are kept when sent; `cursor` replaces `skip`.',
        schema: { type: 'string' },
      },
    },
    responses: {
      BadRequest: response(
        'The body is not valid JSON, does not decompress as its Content-Encoding says, or the path is badly encoded.',
        400,
        'Bad Request',
        'The request body is not valid JSON',
      ),
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
      Conflict: response(
        'Already exists (a second vote, a taken e-mail).',
        409,
        'Conflict',
        'user 1 has already voted on post 7',
      ),
      PayloadTooLarge: response(
        'The body is over 100 kB (after decompression), or its declared Content-Length is: then at once, before the body is read, and the connection closes.',
        413,
        'Payload Too Large',
        'The request body is larger than 100 kB',
      ),
      UnsupportedMediaType: response(
        'The body has the wrong Content-Type, a charset other than UTF-8, or an unsupported Content-Encoding.',
        415,
        'Unsupported Media Type',
        'The request body must be application/json',
      ),
      ValidationError: {
        description: 'Invalid fields; `errors` lists each.',
        content: problem({
          title: 'Unprocessable Entity',
          status: 422,
          detail: 'Invalid body: title is required',
          errors: [{ field: 'title', message: 'title is required' }],
        }),
      },
      ListValidationError: {
        description:
          'Invalid query fields; `errors` lists each: `limit` or `skip` out of range, a `cursor` this service did not write (altered, truncated, over 64 characters), or `cursor` together with `skip` (even `skip=0`).',
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
        'The database did not answer; retry shortly.',
        503,
        'Service Unavailable',
        'The database is not available right now; try again shortly',
      ),
    },
  },
  // Each path is documented in the comment below the router that serves it.
  paths: {},
};

let cached: object | undefined;

/** The OpenAPI document, built once from the shared parts and the comments beside each route. */
export function openApiDocument(): object {
  // Both the TypeScript sources (tests, tsx) and the compiled files keep the route comments.
  cached ??= swaggerJsdoc({
    definition,
    apis: [
      path.join(__dirname, '..', '**', '*.routes.{ts,js}'),
      path.join(__dirname, '..', 'health.{ts,js}'),
    ],
  });
  return cached;
}

// swagger-ui-express answers any path ending in /package.json with a bare text/plain 404;
// leaving this router sends such paths to the app's problem+json 404 instead.
const leaveForPackageJson: RequestHandler = (req, _res, next) => {
  next(req.path.endsWith('/package.json') ? 'router' : undefined);
};

export function docsRouter(): Router {
  const router = exactRouter();
  const document = openApiDocument();
  router.get('/openapi.json', (_req, res) => {
    res.json(document);
  });
  const uiOptions = {
    customSiteTitle: 'Social Posts API',
    // The token lives in the page (localStorage), never in a cookie.
    swaggerOptions: { persistAuthorization: true, validatorUrl: null },
  };
  // The page answers 200 at /docs itself (no redirect to /docs/), so its asset links are absolute.
  const page = swaggerUi.generateHTML(document, uiOptions).replace(/(href|src)="\.\//g, '$1="/docs/');
  router.get(['/docs', '/docs/'], pageHeaders, (_req, res) => {
    res.type('html').send(page);
  });
  router.use('/docs', pageHeaders, leaveForPackageJson, swaggerUi.serveFiles(document, uiOptions));
  return router;
}
