import Joi from 'joi';
import { idSchema, nulError } from '../http/validation';

/** Text PostgreSQL can store (no NUL) and that is not only whitespace. */
function text(max: number): Joi.StringSchema {
  return Joi.string()
    .min(1)
    .max(max)
    .custom((value: string, helpers) => {
      const nul = nulError(value, helpers);
      if (nul) return nul;
      if (value.trim() === '') return helpers.message({ custom: '{#label} must not be blank' });
      return value;
    })
    .description('Not blank; no NUL.');
}

// Each schema validates the request, names its OpenAPI component (`className`, read by docs.ts)
// and is checked against its TypeScript type by the compiler (`Joi.object<T, true>` wants every
// field of T, each with a schema of its type).

export interface PostInput {
  title: string;
  content: string;
  published: boolean;
}

/** Create and update take the same fields; `published` defaults to true in both. */
export const postInput = Joi.object<PostInput, true>({
  title: text(300).required(),
  content: text(20_000).required(),
  published: Joi.boolean().default(true),
})
  .description('Unknown fields (such as `id`) are ignored.')
  .meta({ className: 'PostInput' });

export interface ListQuery {
  limit: number;
  skip: number;
  search?: string;
}

export const listQuery = Joi.object<ListQuery, true>({
  limit: Joi.number().integer().min(1).max(100).default(10).description('Page size.'),
  skip: Joi.number().integer().min(0).default(0).description('Posts to skip first.'),
  search: Joi.string()
    .allow('')
    .max(300)
    .custom((value: string, helpers) => nulError(value, helpers) ?? value)
    .description('Case-insensitive substring of the title; `%` and `_` match themselves.'),
});

export const postIdParams = Joi.object<{ id: number }, true>({
  id: idSchema().required(),
});
