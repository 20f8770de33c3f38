import Joi from 'joi';
import { idSchema, loneSurrogateError, nulError } from '../http/validation';
import { CURSOR_MAX_LENGTH, decodeCursor, type Position } from './posts.cursor';

/** A control character other than tab, line feed and carriage return (NUL has a message of its own). */
const CONTROL = /(?![\t\n\r])\p{Cc}/u;

/**
 * Text that PostgreSQL stores as sent (no NUL, no lone surrogate), not only whitespace where
 * `blank` refuses it (a title), without control characters but tab and line breaks: each would be
 * six bytes (`\u0001`) in every answer that carries it, which would make the largest page
 * (docs/security.md) nearly twice as large.
 */
function text(max: number, { blank }: { blank: 'refused' | 'accepted' }): Joi.StringSchema {
  return Joi.string()
    .min(1)
    .max(max)
    .custom((value: string, helpers) => {
      const nul = nulError(value, helpers);
      if (nul) return nul;
      if (CONTROL.test(value))
        return helpers.message({
          custom:
            '{#label} must not contain control characters other than tab, line feed and carriage return',
        });
      const surrogate = loneSurrogateError(value, helpers);
      if (surrogate) return surrogate;
      if (blank === 'refused' && value.trim() === '')
        return helpers.message({ custom: '{#label} must not be blank' });
      return value;
    })
    .description(
      `${blank === 'refused' ? 'Not blank; no' : 'No'} control characters but tab, line feed and carriage return; no lone surrogates.`,
    );
}

// Each schema validates the request, names its OpenAPI component (`className`, read by
// docs/request-schemas.ts) and is checked against its TypeScript type by the compiler
// (`Joi.object<T, true>` wants every field of T, each with a schema of its type).

export interface PostInput {
  title: string;
  content: string;
  published: boolean;
}

/** Create and update take the same fields; `published` defaults to true in both. */
export const postInput = Joi.object<PostInput, true>({
  title: text(300, { blank: 'refused' }).required(),
  content: text(20_000, { blank: 'accepted' }).required(),
  published: Joi.boolean().default(true),
})
  .description('Unknown fields (such as `id`) are ignored.')
  .meta({ className: 'PostInput' });

export interface ListQuery {
  limit: number;
  /** Absent means 0; it has no schema default, which /docs would pre-fill beside a pasted cursor. */
  skip?: number;
  search?: string;
  /** Sent as the opaque string; decoded here, once, into the position the list continues after. */
  cursor?: Position;
}

/**
 * The cursor as sent, and as the schema's value the position it carries (decodeCursor). joi types a
 * field by the kind of its schema (an object position wants an object schema), hence the cast.
 */
const cursor = Joi.string()
  .max(CURSOR_MAX_LENGTH)
  .custom((value: string, helpers) => {
    // An overlong one is reported by max alone, and never decoded.
    if (value.length > CURSOR_MAX_LENGTH) return value;
    return (
      decodeCursor(value) ??
      helpers.message({
        custom: '{#label} is not a cursor this service wrote; start again from the first page',
      })
    );
  })
  .description(
    'Opaque keyset position, taken from the `Link: rel="next"` header of the previous page: the page holds the posts after it. ' +
      'It carries only a position, so it is valid on either list. Not with `skip`.',
  ) as unknown as Joi.ObjectSchema<Position>;

/**
 * The deepest `skip`: an offset is read and thrown away row by row, so its cost grows with it; the
 * cursor pages deeper at the cost of a first page.
 */
const SKIP_MAX = 10_000;

export const listQuery = Joi.object<ListQuery, true>({
  limit: Joi.number()
    .integer()
    .min(1)
    .max(100)
    .default(10)
    .description('Page size, a plain decimal integer (`1e1` or `010` is 422).'),
  skip: Joi.number()
    .integer()
    .min(0)
    .max(SKIP_MAX)
    .messages({
      'number.max': `{#label} must be at most ${SKIP_MAX}; page deeper with the cursor of the Link header`,
    })
    // ancestors[0] is the query as sent: a skip the client sent, even 0, does not go with a cursor.
    .custom((value: number, helpers) =>
      (helpers.state.ancestors as Record<string, unknown>[])[0]?.cursor === undefined
        ? value
        : helpers.message({
            custom: '{#label} cannot be combined with cursor; a cursor page starts where the cursor points',
          }),
    )
    .description(
      `Posts to skip first, at most ${SKIP_MAX}; absent, none (an offset: deeper pages cost more; \`cursor\` pages deeper at the same cost). Not with \`cursor\`.`,
    ),
  search: Joi.string()
    .allow('')
    .max(300)
    .custom((value: string, helpers) => nulError(value, helpers) ?? value)
    .description(
      'Case-insensitive substring of the title; `%` and `_` match themselves. A search without three letters or digits in a row (`a`, `zz`, `%%`) no index serves: only a few run at once per replica, and beyond them the answer is 503 with `Retry-After` at once.',
    ),
  cursor,
});

export const postIdParams = Joi.object<{ id: number }, true>({
  // More digits than a double holds read as Infinity: still a plain decimal integer, and no post's.
  id: idSchema()
    .allow(Infinity)
    .required()
    .description('A plain decimal integer: `1e0`, `01`, `+1` or ` 1` is 422, not post 1.'),
});
