import type { Router } from 'express';
import type { Database } from '../db/connection';
import { isPossibleId } from '../db/limits';
import { confirmedUnlessGone, unknownCaller, type Authentication, type Identified } from '../http/auth';
import { jsonBody } from '../http/body';
import { ApiError, methodNotAllowed, postNotFound } from '../http/errors';
import { sendJson } from '../http/json';
import { validate } from '../http/validation';
import { addVote, removeVote, type VisiblePost } from './votes.repository';
import { voteInput } from './votes.schemas';

/**
 * The posts' one visibility rule (posts.repository's), which the app hands in so that voting does
 * not reach into the posts: whether the user may see the post, and the post as a query a vote is
 * inserted from.
 */
export interface VisiblePosts {
  visible: (postId: number, userId: number) => Promise<boolean>;
  query: VisiblePost;
}

/** Voting, added to the app's one API router (app.ts). */
export function votesRoutes(
  router: Router,
  db: Database,
  // Voting needs only the caller's id.
  auth: Authentication<Identified>,
  posts: VisiblePosts,
): void {
  router
    .route('/votes/')
    .post(auth.required, ...jsonBody, async (req, res) => {
      const vote = validate(voteInput, req.body, 'body');
      const me = auth.caller(req);
      const userId = me.user.id;
      // The caller's deletion since the look-up takes their drafts and votes with it: each 404 and
      // 409 below is 401 if their user is gone, a query only on those answers. A post or vote gone
      // may be the caller's own deletion or withdrawal on the primary alone: said once the standby
      // has it (confirmedUnlessGone).
      const missingPost = () => confirmedUnlessGone(db, userId, postNotFound(vote.post_id));
      if (!isPossibleId(vote.post_id)) throw await missingPost();

      if (vote.dir === 1) {
        // A post the caller cannot read cannot be voted on either: the insert itself asks, and
        // says which of the two kept the vote out, as the post was when it looked.
        const outcome = await addVote(db, posts.query, userId, vote.post_id);
        if (outcome === 'no-user') throw unknownCaller();
        if (outcome === 'missing') throw await missingPost();
        if (outcome === 'voted')
          throw await me.unlessGone(
            new ApiError(409, `user ${userId} has already voted on post ${vote.post_id}`),
          );
        sendJson(res.status(201), { message: 'successfully added vote' });
        return;
      }
      if (!(await posts.visible(vote.post_id, userId))) throw await missingPost();
      if (!(await removeVote(db, userId, vote.post_id)))
        throw await confirmedUnlessGone(db, userId, new ApiError(404, 'Vote does not exist'));
      sendJson(res.status(201), { message: 'successfully deleted vote' });
    })
    .all(methodNotAllowed(['POST']));
}

/**
 * The OpenAPI parts of voting (the app hands them to docs/openapi.ts): the request body, generated
 * from the schema that validates it, the answer, and the comment below.
 */
export const votesDocs = {
  tags: [{ name: 'Votes' }],
  bodies: [voteInput],
  schemas: {
    Message: { type: 'object', required: ['message'], properties: { message: { type: 'string' } } },
  },
  // Both the TypeScript source (tests, tsx) and the compiled file keep the comments.
  apis: [__filename],
};

/**
 * @openapi
 * /votes/:
 *   post:
 *     tags: [Votes]
 *     summary: Cast (dir 1) or withdraw (dir 0) the caller's vote on a post
 *     description: >
 *       One vote per user and post. The post is checked first (404 when missing or not visible to
 *       the caller); then a second vote is 409 and withdrawing a vote that does not exist is 404.
 *     security: [{ bearerAuth: [] }, { oauth2Password: [] }]
 *     requestBody:
 *       required: true
 *       content:
 *         application/json:
 *           schema: { $ref: '#/components/schemas/Vote' }
 *     responses:
 *       201:
 *         description: The vote was added or withdrawn.
 *         content:
 *           application/json:
 *             schema: { $ref: '#/components/schemas/Message' }
 *             examples:
 *               added: { value: { message: successfully added vote } }
 *               deleted: { value: { message: successfully deleted vote } }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       401: { $ref: '#/components/responses/Unauthorized' }
 *       404: { $ref: '#/components/responses/NotFound' }
 *       409: { $ref: '#/components/responses/Conflict' }
 *       413: { $ref: '#/components/responses/PayloadTooLarge' }
 *       415: { $ref: '#/components/responses/UnsupportedMediaType' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 */
