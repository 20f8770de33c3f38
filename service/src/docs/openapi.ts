import { isDeepStrictEqual } from 'node:util';
import type Joi from 'joi';
import joiToSwagger from 'joi-to-swagger';
import swaggerJsdoc from 'swagger-jsdoc';
// The release's own version, so /docs names the build that answers; compiled into dist/ beside the code.
import packageJson from '../../../package.json';
import { BODY_LIMIT_TEXT } from '../http/body';
import { requestComponents, type OpenApiSchema, type ParameterSource } from './request-schemas';
import { PROBLEM_SCHEMA, SHARED_RESPONSES } from './responses';

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

/** The document's title, version and the rules every call shares, shown atop /docs. */
const info = () => ({
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
    '**Tokens** are HS256 JWTs whose header `kid` names the key that signed them (a token naming a key the service does not accept is 401). They must carry numeric `exp` (in the future) and `iat` (at most 30 s ahead: the clock skew allowed), with `exp - iat` at most ACCESS_TOKEN_EXPIRE_MINUTES; `nbf`, if present, at most 30 s ahead as well; `iss` and `aud` both naming the deployment (`TOKEN_ISSUER`; a token with neither is accepted only for one token lifetime after the service starts); no `jti`; no `crit` or `b64` in the header (extensions the service does not implement). Otherwise 401.',
    '',
    '**E-mail addresses** are normalised (Unicode NFKC; domain per UTS #46) before the uniqueness check and at login; invisible or formatting characters and a local part or domain label mixing scripts are 422.',
    '',
    '**CSRF**: credentials travel only in the `Authorization` header, never in a cookie; JSON endpoints refuse the content types a cross-site form can send (415, or 401 first without a token); `/login` returns its token only in the response body, which a foreign origin cannot read. There is no CSRF token, by design.',
  ].join('\n'),
});

// Swagger UI's Authorize dialog lists these in this order: the e-mail and password login first.
const SECURITY_SCHEMES = {
  oauth2Password: { type: 'oauth2', flows: { password: { tokenUrl: '/login', scopes: {} } } },
  bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
};

/** The components: generated from what the features hand in (parts), around the shared ones. */
function components(parts: readonly DocsPart[]) {
  const requests = requestComponents(
    parts.flatMap((part) => part.bodies ?? []),
    parts.flatMap((part) => part.parameters ?? []),
  );
  return {
    securitySchemes: SECURITY_SCHEMES,
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
      ifNoneMatchChange: {
        in: 'header',
        name: 'If-None-Match',
        required: false,
        description:
          'Change only a version of the post this does not name: `*` (any existing post) or an `ETag` of it, compared as If-Match compares them, is 412 and nothing changes; a value that is neither `*` nor a list of tags is 412 too.',
        schema: { type: 'string', example: '*' },
      },
      idempotencyKey: {
        in: 'header',
        name: 'Idempotency-Key',
        required: false,
        description:
          'Makes a retry safe: a second request of the same user with the same key makes no new post but answers 201 with the post the first one made (as it is now), however the first one ended (a lost answer, a 503 saying the change may or may not stand). The same key with another title, content or `published`: 422. A key is freed when its post is deleted. 1 to 255 visible ASCII characters or spaces, no quote, backslash or comma inside; an sf-string (`"…"`) has its quotes taken off.',
        schema: { type: 'string', example: '"8e03978e-40d5-43e8-bc93-6894a57f9324"' },
      },
    },
    schemas: merged([
      requests.schemas,
      answerComponents(parts.flatMap((part) => part.answers ?? [])),
      ...parts.map((part) => part.schemas),
      { Problem: PROBLEM_SCHEMA },
    ]),
    headers: merged(parts.map((part) => part.headers)),
    responses: SHARED_RESPONSES,
  };
}

/** The parts every route shares, around what the features hand in (parts). */
const definition = (parts: readonly DocsPart[]) => ({
  openapi: '3.0.3',
  info: info(),
  tags: parts.flatMap((part) => part.tags),
  components: components(parts),
  // Each path is documented in the comment beside the router that serves it (DocsPart.apis).
  paths: {},
});

/**
 * The OpenAPI document: the shared parts, what each feature hands in, and the comments beside its
 * routes. swagger-jsdoc reads those files, so the app builds it once, not per request.
 */
export function openApiDocument(parts: readonly DocsPart[]): object {
  return swaggerJsdoc({ definition: definition(parts), apis: parts.flatMap((part) => part.apis) });
}
