import Joi from 'joi';
import { MAX_ID } from '../posts/posts.schemas';

export interface VoteInput {
  post_id: number;
  dir: 0 | 1;
}

export const voteInput = Joi.object<VoteInput>({
  post_id: Joi.number().integer().min(1).max(MAX_ID).required(),
  dir: Joi.number().valid(0, 1).required(),
});
