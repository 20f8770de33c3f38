import Joi from 'joi';
import { publicUserSchema, userSchema, type PublicUser, type User } from '../users/user';

/** The one post shape every endpoint returns: its row with its owner and vote total. */
export interface Post {
  id: number;
  title: string;
  content: string;
  published: boolean;
  created_at: Date;
  user_id: number;
  owner: User;
  votes: number;
}

/** A post on the public feed, which anyone may read: its owner without an e-mail address. */
export interface PublicPost extends Omit<Post, 'owner'> {
  owner: PublicUser;
}

// The answers' shapes: their OpenAPI components are generated from these (docs/openapi.ts), and the
// compiler checks each against its type (`Joi.object<T, true>` wants every field, each of its type).

/** The fields both shapes share, in the order the document lists them. */
const fields = {
  id: Joi.number().integer().required().example(7),
  title: Joi.string().required(),
  content: Joi.string().required(),
  published: Joi.boolean().required(),
  created_at: Joi.date().required(),
  user_id: Joi.number().integer().required(),
} satisfies Joi.StrictSchemaMap<Omit<Post, 'owner' | 'votes'>>;
const votes = Joi.number().integer().min(0).required().description('Total votes on the post.');

/** Open (`unknown`), so a client does not take a field added later for an error. */
export const postSchema = Joi.object<Post, true>({ ...fields, owner: userSchema.required(), votes })
  .unknown()
  .meta({ className: 'Post' });

export const publicPostSchema = Joi.object<PublicPost, true>({
  ...fields,
  owner: publicUserSchema.required(),
  votes,
})
  .unknown()
  .description(
    "A post on the public feed, which anyone may read: the same shape, the owner's e-mail address left out.",
  )
  .meta({ className: 'PublicPost' });
