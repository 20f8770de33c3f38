import Joi from 'joi';

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

export const userCreate = Joi.object<UserCreate>({
  email: Joi.string()
    .max(254)
    .email({ tlds: { allow: false } })
    .required(),
  password: password.required(),
});
