import Joi from 'joi';
import { hasNul } from '../db/limits';
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
  if (where !== 'body') refuseNonCanonical(schema, value, where);
  // No body at all is checked as an empty one; a JSON `null` is refused as what it is, not an object.
  const result = schema.validate(value === undefined ? {} : value, {
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

/**
 * How an integer is written in a path or query: decimal digits, no sign but a minus, no leading
 * zero, no exponent, point or blank. joi converts `1e0`, `01`, `+1` and ` 1` to 1, so one
 * resource would answer at many addresses and a cache or log would see them as different ones.
 */
const CANONICAL_INTEGER = /^(?:0|-?[1-9][0-9]*)$/;

/** The integer fields of an object schema, worked out once per schema from joi's own description. */
const integerFields = new WeakMap<Joi.Schema, string[]>();

function integerFieldsOf(schema: Joi.Schema): string[] {
  let fields = integerFields.get(schema);
  if (fields === undefined) {
    const keys = (schema.describe() as { keys?: Record<string, Joi.Description> }).keys ?? {};
    fields = Object.entries(keys)
      .filter(
        ([, key]) =>
          key.type === 'number' &&
          ((key.rules ?? []) as { name: string }[]).some((rule) => rule.name === 'integer'),
      )
      .map(([name]) => name);
    integerFields.set(schema, fields);
  }
  return fields;
}

/** A 422 for any integer field of a path or query not written as a plain decimal integer. */
function refuseNonCanonical(schema: Joi.Schema, value: unknown, where: 'query' | 'path'): void {
  if (typeof value !== 'object' || value === null) return;
  const sent = value as Record<string, unknown>;
  const errors = integerFieldsOf(schema)
    .filter((field) => {
      const raw = sent[field];
      // Anything but a string (a repeated query parameter, say) is left for joi's own message.
      return typeof raw === 'string' && !CANONICAL_INTEGER.test(raw);
    })
    .map((field) => ({
      field,
      message: `${field} must be a plain decimal integer (digits only, no leading zero, sign, exponent or blank)`,
    }));
  if (errors.length > 0)
    throw new ApiError(422, `Invalid ${where}: ${errors.map((e) => e.message).join('; ')}`, { errors });
}

/**
 * An id in a path or body: any integer, as no post may be 404 for one and 422 for another; the
 * routes answer one that no row can have (isPossibleId) as a missing post before it reaches SQL.
 */
export const idSchema = (): Joi.NumberSchema => Joi.number().integer().unsafe();

/** For a joi `custom` rule: the NUL refusal every text field shares, or undefined when there is none. */
export function nulError(value: string, helpers: Joi.CustomHelpers): Joi.ErrorReport | undefined {
  return hasNul(value) ? helpers.message({ custom: '{#label} must not contain NUL characters' }) : undefined;
}

/** Half of a surrogate pair without the other: no character, and UTF-8 cannot store it as sent. */
const LONE_SURROGATE = /\p{Cs}/u;

/** For a joi `custom` rule: the lone-surrogate refusal of text fields, or undefined when there is none. */
export function loneSurrogateError(value: string, helpers: Joi.CustomHelpers): Joi.ErrorReport | undefined {
  return LONE_SURROGATE.test(value)
    ? helpers.message({
        custom:
          '{#label} must not contain a lone surrogate (\\uD800 to \\uDFFF without its pair): it is not a character',
      })
    : undefined;
}
