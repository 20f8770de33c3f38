import Joi from 'joi';
import { idSchema } from '../http/validation';

export interface VoteInput {
  post_id: number;
  dir: 0 | 1;
}

/** The OpenAPI component `Vote` is generated from this schema (see docs/openapi.ts). */
export const voteInput = Joi.object<VoteInput, true>({
  post_id: idSchema().required(),
  dir: Joi.number().valid(0, 1).required().description('1 adds the vote, 0 withdraws it.'),
}).meta({ className: 'Vote' });
