import { ApiError } from '../http/errors';

/** Missing, or another user's draft: the two are answered alike (by posts and votes). */
export const postNotFound = (id: number): ApiError => new ApiError(404, `post with id: ${id} was not found`);

/** Visible to the caller but not theirs. */
export const notYourPost = (): ApiError => new ApiError(403, 'Not authorized to perform requested action');
