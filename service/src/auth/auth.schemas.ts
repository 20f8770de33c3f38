import Joi from 'joi';

export interface LoginForm {
  username: string;
  password: string;
}

/**
 * Any string is accepted here: a malformed e-mail simply matches no user and gets the same 403.
 * `username` is compared after the e-mail policy's normalisation (users/email.ts). The OpenAPI
 * component `LoginForm` is generated from this schema (see docs.ts).
 */
export const loginForm = Joi.object<LoginForm, true>({
  username: Joi.string().max(1000).required().description('The e-mail address.'),
  password: Joi.string()
    .max(1000)
    .required()
    .meta({ swagger: { format: 'password' } }),
}).meta({ className: 'LoginForm' });
