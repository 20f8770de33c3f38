import Joi from 'joi';

export const MAX_ID = 2_147_483_647;

/** Text PostgreSQL can store (no NUL) and that is not only whitespace. */
function text(max: number): Joi.StringSchema {
  return Joi.string()
    .min(1)
    .max(max)
    .custom((value: string, helpers) => {
      if (value.includes('\0'))
        return helpers.message({ custom: '{#label} must not contain NUL characters' });
      if (value.trim() === '') return helpers.message({ custom: '{#label} must not be blank' });
      return value;
    });
}

export interface PostInput {
  title: string;
  content: string;
  published: boolean;
}

/** Create and update take the same fields; `published` defaults to true in both. */
export const postInput = Joi.object<PostInput>({
  title: text(300).required(),
  content: text(20_000).required(),
  published: Joi.boolean().default(true),
});

export interface ListQuery {
  limit: number;
  skip: number;
  search?: string;
}

export const listQuery = Joi.object<ListQuery>({
  limit: Joi.number().integer().min(1).max(100).default(10),
  skip: Joi.number().integer().min(0).default(0),
  search: Joi.string()
    .allow('')
    .max(300)
    .custom((value: string, helpers) =>
      value.includes('\0') ? helpers.message({ custom: '{#label} must not contain NUL characters' }) : value,
    ),
});

export const postIdParams = Joi.object<{ id: number }>({
  id: Joi.number().integer().min(1).max(MAX_ID).required(),
});
