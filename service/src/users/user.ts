import Joi from 'joi';

/** A user as the API shows one (never the password hash): a caller, a post's owner. */
export interface User {
  id: number;
  email: string;
  created_at: Date;
}

/** What anyone may see of a user: the owner of a post on the public feed. */
export type PublicUser = Omit<User, 'email'>;

// The answers' shapes: their OpenAPI components are generated from these (docs/openapi.ts), and the
// compiler checks each against its type (`Joi.object<T, true>` wants every field, each of its type).
const id = Joi.number().integer().required().example(1);
const createdAt = Joi.date().required();

/** Open (`unknown`), so a client does not take a field added later for an error. */
export const userSchema = Joi.object<User, true>({
  id,
  email: Joi.string().email().required().example('a@b.io'),
  created_at: createdAt,
})
  .unknown()
  .meta({ className: 'User' });

/** Closed: the document says that no e-mail address is in it. */
export const publicUserSchema = Joi.object<PublicUser, true>({ id, created_at: createdAt });
