import type { Request, RequestHandler, Response, Router } from 'express';
import type { Knex } from 'knex';
import type { Database } from '../db/connection';
import { isPossibleId } from '../db/limits';
import { confirmedUnlessGone, unknownCaller, type Authentication, type Caller } from '../http/auth';
import { jsonBody } from '../http/body';
import { changeConditionsHold, ifMatch, ifNoneMatch, preconditionFailed } from '../http/conditional';
import { ApiError, methodNotAllowed, postNotFound } from '../http/errors';
import { idempotencyKey, keyReused, requestDigest } from '../http/idempotency';
import { sendJson } from '../http/json';
import { validate } from '../http/validation';
import { Slots } from '../concurrency';
import type { User } from '../users/user';
import { postSchema, publicPostSchema } from './post';
import { encodeCursor } from './posts.cursor';
import {
  conditionalChange,
  createPost,
  deletePost,
  getPost,
  listPosts,
  searchIsIndexed,
  updatePost,
  visiblePostOwner,
  type ConditionalOutcome,
  type ListPage,
  type ReadTarget,
  type Viewer,
} from './posts.repository';
import { listQuery, postIdParams, postInput, type ListQuery } from './posts.schemas';

/** A search no index serves, while as many as the replica runs at once are running already. */
const searchesBusy = (): ApiError =>
  new ApiError(
    503,
    'Too many searches without three letters or digits in a row are running; try again shortly, or search for a longer term',
    {},
    { 'Retry-After': '1' },
  );

/** Visible to the caller but not theirs. */
const notYourPost = (): ApiError => new ApiError(403, 'Not authorized to perform requested action');

/**
 * What the caller may change: a post they cannot see is `missing` (404, or 401 when the caller's
 * user has gone meanwhile); one they see but do not own, 403.
 */
async function assertOwnPost(
  db: Database,
  id: number,
  userId: number,
  missing: () => Promise<ApiError>,
): Promise<void> {
  const owner = await visiblePostOwner(db, id, { userId });
  if (owner === undefined) throw await missing();
  if (owner !== userId) throw notYourPost();
}

/**
 * A conditional change (If-Match) as the answer it leads to: `missing` (404, or 401 when the caller
 * is gone too) for a post the caller cannot see, 403 for another's, 412 when the post is no longer
 * the one the client's tag names.
 */
async function outcome<T>(
  result: ConditionalOutcome<T | undefined>,
  missing: () => Promise<ApiError>,
): Promise<T> {
  if (result.done) {
    if (result.result === undefined) throw await missing();
    return result.result;
  }
  if (result.why === 'missing') throw await missing();
  if (result.why === 'not-owner') throw notYourPost();
  throw preconditionFailed();
}

/**
 * Sends a list page. When more posts follow, `Link: <…>; rel="next"` (RFC 8288) points at the next
 * page: the path the client asked for, its `limit` and `search` if it sent them, and a cursor (never
 * `skip`, so a walk started from an offset page continues by keyset).
 */
function sendPage(
  req: Request,
  res: Response,
  rawQuery: Request['query'],
  query: ListQuery,
  page: ListPage,
): void {
  if (page.next) {
    const params = [
      ...(rawQuery.limit === undefined ? [] : [`limit=${query.limit}`]),
      ...(query.search === undefined ? [] : [`search=${encodeURIComponent(query.search)}`]),
      `cursor=${encodeCursor(page.next)}`,
    ];
    res.set('Link', `<${req.baseUrl}${req.path}?${params.join('&')}>; rel="next"`);
  }
  sendJson(res, page.posts);
}

/** A list asked for without parameters (most first pages) gets the defaults, which joi decides once. */
const DEFAULT_LIST_QUERY: ListQuery = Object.freeze(validate(listQuery, {}, 'query'));
const listQueryOf = (rawQuery: Request['query']): ListQuery =>
  Object.keys(rawQuery).length === 0 ? DEFAULT_LIST_QUERY : validate(listQuery, rawQuery, 'query');

/**
 * The path's id as written (validated: a plain decimal integer), which `id` rounds past the safe
 * integers.
 */
const idAsSent = (req: Request, id: number): string | number =>
  typeof req.params.id === 'string' ? req.params.id : id;

/**
 * Runs `change` on the caller's own post and returns what it returned (undefined: the post vanished):
 * checked and changed under the post's row lock, with or without If-Match and If-None-Match (without
 * either, the last writer wins), so the answer counts every vote committed before the change. The
 * embedded database's one session runs one request's statements at a time, so no vote can hold the
 * row while a change waits: there the ownership check and the change are two statements. A post
 * not there is 404, or 401 when the caller's user was deleted since the request's look-up (and
 * their posts with it), as for any token whose user no longer exists.
 */
async function changeOwnPost<T>(
  db: Database,
  me: Caller<User>,
  req: Request,
  id: number,
  change: (on: Database | Knex.Transaction) => Promise<T | undefined>,
): Promise<T> {
  const userId = me.user.id;
  // Gone may be this caller's own deletion, retried: said once the synchronous standby has it.
  const missing = () => confirmedUnlessGone(db, userId, postNotFound(idAsSent(req, id)));
  if (!isPossibleId(id)) throw await missing();
  const match = ifMatch(req);
  const noneMatch = ifNoneMatch(req);
  if (match || noneMatch || db.kind === 'postgres') {
    const holds = (post: unknown) => changeConditionsHold(match, noneMatch, post);
    return outcome(await conditionalChange(db, id, userId, holds, change), missing);
  }
  await assertOwnPost(db, id, userId, missing);
  const changed = await change(db);
  if (changed === undefined) throw await missing();
  return changed;
}

/** A list page; a search no index serves takes one of the replica's `unindexed` slots, or is 503. */
function listPage(
  db: Database,
  unindexed: Slots,
  viewer: 'public',
  query: ListQuery,
  on: ReadTarget,
): Promise<ListPage>;
function listPage(
  db: Database,
  unindexed: Slots,
  viewer: Viewer,
  query: ListQuery,
  on: ReadTarget,
): Promise<ListPage | undefined>;
function listPage(
  db: Database,
  unindexed: Slots,
  viewer: Viewer,
  query: ListQuery,
  on: ReadTarget,
): Promise<ListPage | undefined> {
  if (!query.search || searchIsIndexed(query.search)) return listPosts(db, viewer, query, on);
  return unindexed.tryRun(
    () => listPosts(db, viewer, query, on),
    () => {
      throw searchesBusy();
    },
  );
}

/** `/posts/`: the caller's list (published posts and their own drafts), and creating a post. */
function collectionRoutes(router: Router, db: Database, auth: Authentication<User>, unindexed: Slots): void {
  // Express 5 parses req.query anew on each read: read once, validate that.
  const list: RequestHandler = async (req, res) => {
    const rawQuery = req.query;
    // The list's statement finds the caller's user with the page: no look-up of its own.
    const { query, page } = await auth.callerFoundBy(req, res, async (userId) => {
      const query = listQueryOf(rawQuery);
      const page = await listPage(db, unindexed, { userId }, query, 'primary');
      return page && { query, page };
    });
    sendPage(req, res, rawQuery, query, page);
  };
  const create: RequestHandler = async (req, res) => {
    const input = validate(postInput, req.body, 'body');
    const key = idempotencyKey(req);
    const idempotency =
      key === undefined
        ? undefined
        : { key, digest: requestDigest([input.title, input.content, input.published]) };
    const post = await createPost(db, auth.caller(req).user, input, idempotency);
    if (!post) throw unknownCaller();
    if (post === 'key-reused') throw keyReused();
    sendJson(res.status(201), post);
  };
  // Both spellings answer alike (the contract's list path is /posts/).
  router
    .route(['/posts/', '/posts'])
    .get(list)
    .post(auth.required, ...jsonBody, create)
    .all(methodNotAllowed(['GET', 'HEAD', 'POST']));
}

/** `/posts/public`: the feed anyone may read, without a token. */
function publicFeedRoutes(router: Router, db: Database, unindexed: Slots): void {
  router
    .route('/posts/public')
    .get(async (req, res) => {
      const rawQuery = req.query;
      const query = listQueryOf(rawQuery);
      // A caller who sends a token may have just written: they read on the primary, and see their
      // write at once through any replica. Without one there is no write of theirs to miss.
      const on: ReadTarget = req.headers.authorization === undefined ? 'standby' : 'primary';
      sendPage(req, res, rawQuery, query, await listPage(db, unindexed, 'public', query, on));
    })
    .all(methodNotAllowed(['GET', 'HEAD']));
}

/** `/posts/{id}`: reading one post, and its owner replacing or deleting it. */
function onePostRoutes(router: Router, db: Database, auth: Authentication<User>): void {
  router
    .route('/posts/:id')
    .get(auth.required, async (req, res) => {
      const { id } = validate(postIdParams, req.params, 'path');
      const post = isPossibleId(id) ? await getPost(db, id, { userId: auth.caller(req).user.id }) : undefined;
      if (!post) throw postNotFound(idAsSent(req, id));
      sendJson(res, post);
    })
    .put(auth.required, ...jsonBody, async (req, res) => {
      const { id } = validate(postIdParams, req.params, 'path');
      const input = validate(postInput, req.body, 'body');
      const me = auth.caller(req);
      sendJson(res, await changeOwnPost(db, me, req, id, (on) => updatePost(on, id, input)));
    })
    .delete(auth.required, async (req, res) => {
      const { id } = validate(postIdParams, req.params, 'path');
      await changeOwnPost(db, auth.caller(req), req, id, (on) => deletePost(on, id));
      res.status(204).end();
    })
    .all(methodNotAllowed(['GET', 'HEAD', 'PUT', 'DELETE']));
}

export interface PostsOptions {
  /** How many searches the title index cannot serve run at once (SEARCH_UNINDEXED_CONCURRENCY). */
  searchUnindexedConcurrency: number;
}

/** The posts, added to the app's one API router (app.ts). */
export function postsRoutes(
  router: Router,
  db: Database,
  auth: Authentication<User>,
  options: PostsOptions,
): void {
  // Per process: such a search may read the whole table (docs/search.md), so a few at once are all
  // a replica gives them; one more is refused at once rather than queued behind them.
  const unindexed = new Slots(options.searchUnindexedConcurrency);
  collectionRoutes(router, db, auth, unindexed);
  // Before /posts/:id, which would otherwise take `public` for an id.
  publicFeedRoutes(router, db, unindexed);
  onePostRoutes(router, db, auth);
}

/**
 * The OpenAPI parts of the posts (the app hands them to docs/openapi.ts): the request body and
 * parameters, generated from the schemas that validate them, the post's two shapes (post.ts), the
 * paging header, and the comments below.
 */
export const postsDocs = {
  tags: [{ name: 'Posts' }],
  bodies: [postInput],
  parameters: [
    {
      in: 'query' as const,
      schema: listQuery,
      names: { limit: 'limit', skip: 'skip', search: 'search', cursor: 'cursor' },
    },
    { in: 'path' as const, schema: postIdParams, names: { id: 'postId' } },
  ],
  answers: [postSchema, publicPostSchema],
  headers: {
    NextLink: {
      description:
        'RFC 8288, only when more posts follow this page: `</posts/public?limit=20&search=hello&cursor=…>; rel="next"`. The path is the one requested; `limit` and `search` are kept when sent; `cursor` replaces `skip`.',
      schema: { type: 'string' },
    },
  },
  // Both the TypeScript source (tests, tsx) and the compiled file keep the comments.
  apis: [__filename],
};

/**
 * @openapi
 * /posts/:
 *   get:
 *     tags: [Posts]
 *     summary: List posts
 *     description: >
 *       Published posts and the caller's own drafts, newest first (`created_at`, then `id`, both
 *       descending), so consecutive pages never overlap or skip. Also answers at `/posts`.
 *       Paging: `skip` (an offset; deep pages get slower) or `cursor` (a keyset position, equally
 *       fast at any depth), never both. Every page with more posts after it carries
 *       `Link: <…>; rel="next"`; follow it until a page has none. A post sorts by the moment its
 *       creation began: one created during such a walk shows on a fresh walk from the first page,
 *       not on this one, unless its creation was already under way when the walk started.
 *     security: [{ bearerAuth: [] }, { oauth2Password: [] }]
 *     parameters:
 *       - $ref: '#/components/parameters/limit'
 *       - $ref: '#/components/parameters/skip'
 *       - $ref: '#/components/parameters/search'
 *       - $ref: '#/components/parameters/cursor'
 *     responses:
 *       200:
 *         description: A page of posts.
 *         headers:
 *           Link: { $ref: '#/components/headers/NextLink' }
 *         content:
 *           application/json:
 *             schema: { type: array, items: { $ref: '#/components/schemas/Post' } }
 *       304: { $ref: '#/components/responses/NotModified' }
 *       401: { $ref: '#/components/responses/Unauthorized' }
 *       422: { $ref: '#/components/responses/ListValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 *   post:
 *     tags: [Posts]
 *     summary: Create a post
 *     description: >
 *       Send an `Idempotency-Key` to retry safely: a retry with the same key answers with the post
 *       the first request made, and makes no second one.
 *     security: [{ bearerAuth: [] }, { oauth2Password: [] }]
 *     parameters:
 *       - $ref: '#/components/parameters/idempotencyKey'
 *     requestBody:
 *       required: true
 *       content:
 *         application/json:
 *           schema: { $ref: '#/components/schemas/PostInput' }
 *     responses:
 *       201:
 *         description: The new post, with 0 votes.
 *         content:
 *           application/json:
 *             schema: { $ref: '#/components/schemas/Post' }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       401: { $ref: '#/components/responses/Unauthorized' }
 *       413: { $ref: '#/components/responses/PayloadTooLarge' }
 *       415: { $ref: '#/components/responses/UnsupportedMediaType' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 * /posts/public:
 *   get:
 *     tags: [Posts]
 *     summary: The public feed
 *     description: >
 *       Published posts only, no token needed; same query rules, paging (`skip` or `cursor`, and
 *       `Link: rel="next"`) and order as the list. Each post is a `PublicPost`: no e-mail address
 *       goes to anonymous readers. A cursor from either list is valid on the other: it carries
 *       only a position.
 *     parameters:
 *       - $ref: '#/components/parameters/limit'
 *       - $ref: '#/components/parameters/skip'
 *       - $ref: '#/components/parameters/search'
 *       - $ref: '#/components/parameters/cursor'
 *     responses:
 *       200:
 *         description: A page of published posts.
 *         headers:
 *           Link: { $ref: '#/components/headers/NextLink' }
 *         content:
 *           application/json:
 *             schema: { type: array, items: { $ref: '#/components/schemas/PublicPost' } }
 *       304: { $ref: '#/components/responses/NotModified' }
 *       422: { $ref: '#/components/responses/ListValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 * /posts/{id}:
 *   parameters:
 *     - $ref: '#/components/parameters/postId'
 *   get:
 *     tags: [Posts]
 *     summary: Get one post
 *     description: Another user's draft answers 404, as if it did not exist.
 *     security: [{ bearerAuth: [] }, { oauth2Password: [] }]
 *     responses:
 *       200:
 *         description: The post.
 *         content:
 *           application/json:
 *             schema: { $ref: '#/components/schemas/Post' }
 *       304: { $ref: '#/components/responses/NotModified' }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       401: { $ref: '#/components/responses/Unauthorized' }
 *       404: { $ref: '#/components/responses/NotFound' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 *   put:
 *     tags: [Posts]
 *     summary: Replace a post (owner only)
 *     description: >
 *       With `If-Match`, only if the post is still the one that tag names (412 otherwise, and
 *       nothing changes): of two editors sending the same tag, one wins. Without it the last
 *       writer wins.
 *     security: [{ bearerAuth: [] }, { oauth2Password: [] }]
 *     parameters:
 *       - $ref: '#/components/parameters/ifMatch'
 *       - $ref: '#/components/parameters/ifNoneMatchChange'
 *     requestBody:
 *       required: true
 *       content:
 *         application/json:
 *           schema: { $ref: '#/components/schemas/PostInput' }
 *     responses:
 *       200:
 *         description: The updated post.
 *         content:
 *           application/json:
 *             schema: { $ref: '#/components/schemas/Post' }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       401: { $ref: '#/components/responses/Unauthorized' }
 *       403: { $ref: '#/components/responses/Forbidden' }
 *       404: { $ref: '#/components/responses/NotFound' }
 *       412: { $ref: '#/components/responses/PreconditionFailed' }
 *       413: { $ref: '#/components/responses/PayloadTooLarge' }
 *       415: { $ref: '#/components/responses/UnsupportedMediaType' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 *   delete:
 *     tags: [Posts]
 *     summary: Delete a post (owner only)
 *     description: Its votes go with it. With `If-Match`, only if the post is still the one that tag names.
 *     security: [{ bearerAuth: [] }, { oauth2Password: [] }]
 *     parameters:
 *       - $ref: '#/components/parameters/ifMatch'
 *       - $ref: '#/components/parameters/ifNoneMatchChange'
 *     responses:
 *       204: { description: Deleted; no body. }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       401: { $ref: '#/components/responses/Unauthorized' }
 *       403: { $ref: '#/components/responses/Forbidden' }
 *       404: { $ref: '#/components/responses/NotFound' }
 *       412: { $ref: '#/components/responses/PreconditionFailed' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 */
