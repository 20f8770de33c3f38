import Joi from 'joi';
import { hasNul } from '../db/limits';
import { loneSurrogateError, nulError } from '../http/validation';
import { normaliseEmail } from './email';

/** bcrypt reads this many bytes and ignores the rest. */
const BCRYPT_MAX_BYTES = 72;
/** The shortest password, counted in bytes as the longest is: a character may be several. */
const PASSWORD_MIN_BYTES = 8;

/**
 * A password bcrypt compares in full: it reads 72 bytes and stops at a NUL byte. Registration
 * refuses anything else; the login treats it as matching nobody.
 */
export const bcryptComparable = (value: string): boolean =>
  Buffer.byteLength(value, 'utf8') <= BCRYPT_MAX_BYTES && !hasNul(value);

/** Anything bcrypt would ignore is refused instead. */
const password = Joi.string()
  .custom((value: string, helpers) => {
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes < PASSWORD_MIN_BYTES)
      return helpers.message({ custom: `{#label} must be at least ${PASSWORD_MIN_BYTES} bytes in UTF-8` });
    if (bytes > BCRYPT_MAX_BYTES)
      return helpers.message({ custom: `{#label} must be at most ${BCRYPT_MAX_BYTES} bytes in UTF-8` });
    // A lone surrogate would be hashed as U+FFFD, which a password not sent then matches.
    return loneSurrogateError(value, helpers) ?? nulError(value, helpers) ?? value;
  })
  .description(`${PASSWORD_MIN_BYTES} to ${BCRYPT_MAX_BYTES} bytes (UTF-8), no NUL, no lone surrogate.`);

export interface UserCreate {
  email: string;
  password: string;
}

/** The e-mail policy (email.ts) first, then the address format on the normalised form. */
const email = Joi.string()
  .max(254)
  .custom((value: string, helpers) => {
    const result = normaliseEmail(value);
    return result.ok ? result.email : helpers.message({ custom: `{#label} ${result.reason}` });
  })
  .email({ tlds: { allow: false } })
  .description('Stored normalised (Unicode NFKC, domain per UTS #46); unique ignoring letter case.');

/** The OpenAPI component `UserCreate` is generated from this schema (see docs/openapi.ts). */
export const userCreate = Joi.object<UserCreate, true>({
  email: email.required(),
  password: password.required(),
}).meta({ className: 'UserCreate' });

export interface LoginForm {
  username: string;
  password: string;
}

/**
 * Any string is accepted here, of any length the body allows: a malformed or overlong e-mail, or an
 * overlong password, simply matches no user and gets the same 403.
 * `username` is compared after the e-mail policy's normalisation (email.ts). The OpenAPI
 * component `LoginForm` is generated from this schema (see docs/openapi.ts).
 */
export const loginForm = Joi.object<LoginForm, true>({
  username: Joi.string().required().description('The e-mail address.'),
  password: Joi.string()
    .required()
    .meta({ swagger: { format: 'password' } }),
}).meta({ className: 'LoginForm' });
