import express, { type Request, type RequestHandler } from 'express';
import type Joi from 'joi';
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

const BODY_LIMIT = '100kb';

/** A JSON endpoint refuses any other body type up front, instead of reading it as empty. */
const requireJson: RequestHandler = (req, _res, next) => {
  if (req.body === undefined && hasBody(req)) {
    next(new ApiError(415, 'The request body must be application/json'));
    return;
  }
  next();
};

/** The form login reads url-encoded fields only. */
const requireForm: RequestHandler = (req, _res, next) => {
  if (req.body === undefined && hasBody(req)) {
    next(new ApiError(415, 'The request body must be application/x-www-form-urlencoded'));
    return;
  }
  next();
};

/**
 * Body parsing per route, placed after authentication: a request without a valid token is
 * answered 401 before its body is even read.
 */
export const jsonBody: RequestHandler[] = [express.json({ limit: BODY_LIMIT }), requireJson];
export const formBody: RequestHandler[] = [
  express.urlencoded({ extended: false, limit: BODY_LIMIT, parameterLimit: 20 }),
  requireForm,
];

function hasBody(req: Request): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

/** Text PostgreSQL can store: it refuses NUL characters outright. */
export const NO_NUL = /^[^\0]*$/;
