import Joi from 'joi';
import { normaliseEmail } from './email';

/** bcrypt reads 72 bytes and stops at a NUL byte; anything it would ignore is refused instead. */
export const password = Joi.string()
  .min(8)
  .custom((value: string, helpers) => {
    if (Buffer.byteLength(value, 'utf8') > 72)
      return helpers.message({ custom: '{#label} must be at most 72 bytes in UTF-8' });
    if (value.includes('\0')) return helpers.message({ custom: '{#label} must not contain NUL characters' });
    return value;
  });

export interface UserCreate {
  email: string;
  password: string;
}

/** The e-mail policy (email.ts) first, then the address format on the normalised form. */
export const email = Joi.string()
  .max(254)
  .custom((value: string, helpers) => {
    const result = normaliseEmail(value);
    return result.ok ? result.email : helpers.message({ custom: `{#label} ${result.reason}` });
  })
  .email({ tlds: { allow: false } });

export const userCreate = Joi.object<UserCreate>({
  email: email.required(),
  password: password.required(),
});
