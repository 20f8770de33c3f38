import Joi from 'joi';
import { hasNul, MAX_ID } from '../db/limits';
import { ApiError } from './errors';

/**
 * Validates one part of a request against its joi schema and returns the typed, converted value,
 * or throws a 422 listing every problem. Handlers call it after authentication has passed.
 */
export function validate<T>(
  schema: Joi.ObjectSchema<T>,
  value: unknown,
  where: 'body' | 'query' | 'path',
): T {
  const result = schema.validate(value ?? {}, {
    abortEarly: false,
    stripUnknown: true,
    // JSON bodies carry real types; query and path values arrive as strings and are converted.
    convert: where !== 'body',
    errors: { wrap: { label: false } },
  });
  if (result.error) {
    const errors = result.error.details.map((d) => ({
      field: d.path.length > 0 ? d.path.join('.') : where,
      message: d.message,
    }));
    throw new ApiError(422, `Invalid ${where}: ${errors.map((e) => e.message).join('; ')}`, { errors });
  }
  return result.value;
}

/** An id in a path or body: a larger one is a 422 here rather than a database error. */
export const idSchema = (): Joi.NumberSchema => Joi.number().integer().min(1).max(MAX_ID);

/** For a joi `custom` rule: the NUL refusal every text field shares, or undefined when there is none. */
export function nulError(value: string, helpers: Joi.CustomHelpers): Joi.ErrorReport | undefined {
  return hasNul(value) ? helpers.message({ custom: '{#label} must not contain NUL characters' }) : undefined;
}
