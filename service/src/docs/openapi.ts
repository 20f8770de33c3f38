import { isDeepStrictEqual } from 'node:util';
import type Joi from 'joi';
import joiToSwagger from 'joi-to-swagger';
import swaggerJsdoc from 'swagger-jsdoc';
// The release's own version, so /docs names the build that answers; compiled into dist/ beside the code.
import packageJson from '../../../package.json';
import { BODY_LIMIT_TEXT, BODY_TOO_LARGE } from '../http/body';
import { requestComponents, type OpenApiSchema, type ParameterSource } from './request-schemas';

/**
 * What one feature exports for the document (usersDocs, postsDocs...); the app collects them, so
 * this shared layer never imports a feature. Their order is the order of the tags and paths.
 */
export interface DocsPart {
  tags: { name: string }[];
  /** Request bodies, validated and documented by the same joi schemas. */
  bodies?: readonly Joi.ObjectSchema[];
  parameters?: readonly ParameterSource[];
  /** The shapes of the answers, as the components their `className` metas name (answerComponents). */
  answers?: readonly Joi.ObjectSchema[];
  /** Components of the answers that have no joi shape. */
  schemas?: Record<string, OpenApiSchema>;
  headers?: Record<string, OpenApiSchema>;
  /** The files whose `@openapi` comments document the feature's paths. */
  apis: string[];
}

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

/** One component name, one definition: a name two parts both define is a mistake, not an override. */
function merged(records: (Record<string, OpenApiSchema> | undefined)[]): Record<string, OpenApiSchema> {
  const out: Record<string, OpenApiSchema> = {};
  for (const [name, value] of records.flatMap((record) => Object.entries(record ?? {}))) {
    if (name in out) throw new Error(`two parts of the OpenAPI document define ${name}`);
    out[name] = value;
  }
  return out;
}

/**
 * The answers' components, converted by joi-to-swagger as they are (no request-side corrections: an
 * answer's object is open or closed as its shape says). A shape nested in another (a post's owner)
 * comes with it, under its own name; one name given to two different shapes is a mistake.
 */
function answerComponents(shapes: readonly Joi.ObjectSchema[]): Record<string, OpenApiSchema> {
  const out: Record<string, OpenApiSchema> = {};
  for (const shape of shapes) {
    const named = (joiToSwagger(shape).components?.schemas ?? {}) as Record<string, OpenApiSchema>;
    for (const [name, schema] of Object.entries(named)) {
      if (name in out && !isDeepStrictEqual(out[name], schema))
        throw new Error(`two answer shapes are named ${name}`);
      out[name] = schema;
    }
  }
  return out;
}

/** The parts every route shares, around what the features hand in (parts). */
const definition = (parts: readonly DocsPart[]) => {
  const requests = requestComponents(
    parts.flatMap((part) => part.bodies ?? []),
    parts.flatMap((part) => part.parameters ?? []),
  );
  return {
    openapi: '3.0.3',
    info: {
      title: 'Social Posts API',
      version: packageJson.version,
      description: [
        'Register, log in for a bearer token, write posts, vote, read the public feed.',
        '',
        'Press **Authorize** and log in with your e-mail as `username` (OAuth2 password flow, form POST to `/login`), then try any call.',
        '',
        'Every error is `application/problem+json` with `detail`. A request without a valid token is answered 401 before its body is read.',
        'Cross-origin calls are allowed only from the configured origins (`CORS_ALLOWED_ORIGINS`); every answer carries `Vary: Origin` because it depends on the origin.',
        'No cookies are ever set.',
        '',
        `**Bodies**: JSON endpoints read \`application/json\`, \`/login\` reads \`application/x-www-form-urlencoded\`, both in UTF-8 only (a \`charset\` other than \`utf-8\` is 415), at most ${BODY_LIMIT_TEXT} after decompression. \`Content-Encoding\` may be \`gzip\`, \`deflate\` or \`br\` (one at most; anything else 415; a body that does not decompress 400). A declared \`Content-Length\` over ${BODY_LIMIT_TEXT} is 413 before the body is read (and any answer to such a request closes the connection), and \`Expect: 100-continue\` is answered \`100 Continue\` only when the body is about to be read; any other \`Expect\` is 417. A request without \`Host\`, or with two, is 400.`,
        '',
        '**Tokens** are HS256 JWTs whose header `kid` names the key that signed them (a token naming a key the service does not accept is 401). They must carry numeric `exp` (in the future) and `iat` (at most 30 s ahead: the clock skew allowed), with `exp - iat` at most ACCESS_TOKEN_EXPIRE_MINUTES; `nbf`, if present, at most 30 s ahead as well; no `iss`, `aud` or `jti`; no `crit` or `b64` in the header (extensions the service does not implement). Otherwise 401.',
        '',
        '**E-mail addresses** are normalised (Unicode NFKC; domain per UTS #46) before the uniqueness check and at login; invisible or formatting characters and a local part or domain label mixing scripts are 422.',
        '',
        '**CSRF**: credentials travel only in the `Authorization` header, never in a cookie; JSON endpoints refuse the content types a cross-site form can send (415, or 401 first without a token); `/login` returns its token only in the response body, which a foreign origin cannot read. There is no CSRF token, by design.',
      ].join('\n'),
    },
    tags: parts.flatMap((part) => part.tags),
    components: {
      // Swagger UI's Authorize dialog lists these in this order: the e-mail and password login first.
      securitySchemes: {
        oauth2Password: { type: 'oauth2', flows: { password: { tokenUrl: '/login', scopes: {} } } },
        bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
      },
      // Request bodies and parameters are generated from their joi schemas (requestComponents).
      parameters: {
        ...requests.parameters,
        ifMatch: {
          in: 'header',
          name: 'If-Match',
          required: false,
          description:
            'Change only the version of the post this names: the `ETag` of a GET of it (weak tags are compared as such, `W/` or not), several separated by commas, or `*` for any. A post changed since (an edit, a vote) no longer matches: 412, and nothing changes. Without it the last writer wins.',
          schema: { type: 'string', example: 'W/"1c4-Qk0xFAqHqgYb4G2jL0J0kNNpmu8"' },
        },
      },
      schemas: merged([
        requests.schemas,
        answerComponents(parts.flatMap((part) => part.answers ?? [])),
        ...parts.map((part) => part.schemas),
        {
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
      ]),
      headers: merged(parts.map((part) => part.headers)),
      responses: {
        BadRequest: response(
          'The body is not valid JSON, does not decompress as its Content-Encoding says or is cut short, or the path is badly percent-encoded.',
          400,
          'Bad Request',
          'The request body is not valid JSON',
        ),
        NotModified: {
          description:
            'The answer is unchanged since the `ETag` the request repeats in `If-None-Match`: no body.',
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
          "`If-Match` names no current version of the post (it changed since the client read it, or the value is not `*` or a list of entity-tags); nothing was changed. Read the post again (GET) and send that answer's `ETag`.",
          412,
          'Precondition Failed',
          "The post has changed since the ETag given in If-Match: read it again (GET) and use that answer's ETag",
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
          'The database did not answer, or (lists) too many searches no index serves are running on this replica; retry after `Retry-After` seconds.',
          503,
          'Service Unavailable',
          'The database is not available right now; try again shortly',
        ),
      },
    },
    // Each path is documented in the comment beside the router that serves it (DocsPart.apis).
    paths: {},
  };
};

/**
 * The OpenAPI document: the shared parts, what each feature hands in, and the comments beside its
 * routes. swagger-jsdoc reads those files, so the app builds it once, not per request.
 */
export function openApiDocument(parts: readonly DocsPart[]): object {
  return swaggerJsdoc({ definition: definition(parts), apis: parts.flatMap((part) => part.apis) });
}
