import type { Knex } from 'knex';
import { readConfirmed } from '../db/confirmed';
import type { Database } from '../db/connection';
import { brokenConstraint } from '../db/errors';
import { retryingRaces } from '../db/races';
import { statement, type Param, type Statement } from '../db/statements';
import type { User } from '../users/user';
import type { Post, PublicPost } from './post';
import type { Position } from './posts.cursor';
import type { ListQuery, PostInput } from './posts.schemas';

/** A post's row as the API shows it. */
type PostRow = Omit<Post, 'owner' | 'votes'>;

/** The columns a post is read with: every field of its row, which the compiler holds to Post's. */
const POST_COLUMNS = Object.keys({
  id: true,
  title: true,
  content: true,
  published: true,
  created_at: true,
  user_id: true,
} satisfies Record<keyof PostRow, true>) as (keyof PostRow)[];

interface PostWithOwnerRow extends PostRow {
  owner_email: string;
  owner_created_at: Date;
  votes: number;
}

/** Who is looking: an authenticated caller also sees their own drafts; the public sees published posts. */
export type Viewer = { userId: number } | 'public';

/**
 * The visibility rule, as SQL: published posts, and for a signed-in viewer their own drafts too.
 * In a statement, the viewer's id is the statement's parameter (see statements.ts).
 */
function visibleTo(viewer: Viewer) {
  return (q: Knex.QueryBuilder) => {
    // `published` as written, not `published = $1`: a prepared statement's generic plan can then
    // still prove the partial index's predicate (WHERE published) and use it.
    if (viewer === 'public') void q.whereRaw('"published"');
    else
      void q.where((w) => {
        void w.whereRaw('"published"').orWhere('user_id', viewer.userId);
      });
  };
}

/** A viewer's part of a statement's values: the signed-in user's id; nothing for the public. */
interface ViewerParams {
  userId?: number;
}
const viewerParams = (viewer: Viewer): ViewerParams => (viewer === 'public' ? {} : { userId: viewer.userId });

/** Which of a query's statements a viewer runs: their SQL differs in the visibility rule. */
export type ViewerKind = 'public' | 'user';
const viewerKind = (viewer: Viewer): ViewerKind => (viewer === 'public' ? 'public' : 'user');

/** The viewer as a statement of that kind writes it: the user's id is its `userId` parameter. */
const viewerWithIdParam = (kind: ViewerKind, param: Param<ViewerParams>): Viewer =>
  kind === 'public' ? 'public' : { userId: param('userId') };

/** A query's statements, one per kind of viewer. */
export type StatementPerViewerKind<P> = Record<ViewerKind, Statement<P & ViewerParams>>;

/** A query for either kind of viewer: statements named `<name>_public` and `<name>_for_user`. */
function statementPerViewerKind<P extends object>(
  name: string,
  build: (knex: Knex, param: Param<P & ViewerParams>, viewer: Viewer) => Knex.QueryBuilder,
): StatementPerViewerKind<P> {
  return {
    public: statement<P & ViewerParams>(`${name}_public`, (knex, param) => build(knex, param, 'public')),
    user: statement<P & ViewerParams>(`${name}_for_user`, (knex, param) =>
      build(knex, param, viewerWithIdParam('user', param)),
    ),
  };
}

/** Runs the viewer's statement of a query, with the viewer's id bound. */
function runForViewer<Row, P extends object>(
  db: Database,
  statements: StatementPerViewerKind<P>,
  viewer: Viewer,
  params: P,
): Promise<Row[]> {
  return db.run<Row, P & ViewerParams>(statements[viewerKind(viewer)], {
    ...params,
    ...viewerParams(viewer),
  });
}

const NEWEST_FIRST = [
  { column: 'created_at', order: 'desc' },
  { column: 'id', order: 'desc' },
] as const;

/** LIKE treats % and _ as wildcards and \ as their escape; a search means them literally. */
function likeSubstring(search: string): string {
  return `%${search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * Whether the title's trigram index (pg_trgm) can serve a search: pg_trgm finds rows by the
 * trigrams of the term's words, and a word it can use here is a run of at least three letters or
 * digits (between the pattern's wildcards, a shorter word gives none). Anything else (`a`, `zz`,
 * `%%%%`, `_`, `a b`) the planner answers by walking the newest-first index with the filter, which
 * stops after a page (a common term), or by reading the whole table (a rare one): see
 * docs/search.md. Only ASCII letters and digits count: which other characters pg_trgm takes for
 * letters depends on the database's locale (none under C).
 */
export function searchIsIndexed(search: string): boolean {
  return /[A-Za-z0-9]{3}/.test(search);
}

/**
 * Adds owner and vote count to a set of post rows. The count is the post's row in
 * `post_vote_counts`, which triggers keep (migration 20261125000005), so no vote is counted per
 * request; a post the background backfill has not reached yet (no row) has its votes counted here.
 */
function withOwnerAndVotes(knex: Knex, rows: Knex.QueryBuilder): Knex.QueryBuilder {
  return knex
    .with('page', rows)
    .select(
      'page.*',
      'u.email as owner_email',
      'u.created_at as owner_created_at',
      knex.raw('coalesce(c.votes, (SELECT count(*)::int FROM votes v WHERE v.post_id = page.id)) AS votes'),
    )
    .from('page')
    .join('users as u', 'u.id', 'page.user_id')
    .leftJoin('post_vote_counts as c', 'c.post_id', 'page.id');
}

function toPost(row: PostWithOwnerRow): Post {
  return {
    id: row.id,
    title: row.title,
    content: row.content,
    published: row.published,
    created_at: row.created_at,
    user_id: row.user_id,
    owner: { id: row.user_id, email: row.owner_email, created_at: row.owner_created_at },
    votes: row.votes,
  };
}

/** A post as anyone may read it: its owner without an e-mail address. */
function toPublicPost(row: PostWithOwnerRow): PublicPost {
  const { owner, votes, ...post } = toPost(row);
  return { ...post, owner: { id: owner.id, created_at: owner.created_at }, votes };
}

/** A list page, and the position after its last post when more posts follow. */
export interface ListPage {
  posts: (Post | PublicPost)[];
  next?: Position;
}

/** A post of a list page, with its place in the order and whether more follow the page. */
type PageRow = PostWithOwnerRow & { position_micros: string; has_more: boolean };
/** A list statement's row: a signed-in viewer's adds their id, and is all nulls but that without a post. */
type ListRow = PageRow | { [K in keyof PageRow]: null };
const isPost = (row: ListRow): row is PageRow => row.id !== null;

/** The values of one list query; which of them are present picks its statement. */
export interface ListParams extends ViewerParams {
  search?: string;
  afterMicros?: string;
  afterId?: number;
  /** The rows the page reads: the extra one only tells whether another page follows. */
  limitPlusOne: number;
  limit: number;
  offset: number;
}

/**
 * The one place the list SQL is built, once per shape: the viewer's kind (public or signed in),
 * with or without a search, with or without a cursor; all else is a bound value. The page CTE
 * reads limit + 1 rows; the outer query keeps `limit` of them with their owners, and tells from
 * the extra row whether another page follows. A cursor is a row-value comparison on
 * (created_at, id), which the newest-first indexes answer as an index condition; its timestamp is
 * rebuilt from integer microseconds exactly.
 */
function buildListStatement(kind: ViewerKind, search: boolean, cursor: boolean): Statement<ListParams> {
  const name = `posts_${kind}${search ? '_search' : ''}${cursor ? '_after' : ''}`;
  return statement<ListParams>(name, (knex, param) => {
    const page = knex('posts')
      .select(
        ...POST_COLUMNS,
        knex.raw('(extract(epoch FROM created_at) * 1000000)::bigint::text AS position_micros'),
      )
      .modify(visibleTo(viewerWithIdParam(kind, param)))
      .orderBy([...NEWEST_FIRST])
      .limit(param('limitPlusOne'))
      .offset(param('offset'));
    // Both sides folded the same way on any locale (fold_case); the trigram index on
    // fold_case(title) serves it.
    if (search) void page.whereRaw('fold_case(title) LIKE fold_case(?)', [param('search')]);
    if (cursor)
      void page.whereRaw(
        `(created_at, id) < (timestamptz 'epoch' + ?::bigint * interval '1 microsecond', ?::int)`,
        [param('afterMicros'), param('afterId')],
      );
    const listed = withOwnerAndVotes(knex, page)
      .select(knex.raw('(SELECT count(*) FROM page) > ? AS has_more', [param('limit')]))
      .orderBy(NEWEST_FIRST.map((o) => ({ column: `page.${o.column}`, order: o.order })))
      .limit(param('limit'));
    if (kind === 'public') return listed;
    // The signed-in viewer's own row, with the page joined to it: a viewer whose user is gone gets
    // no row at all, one with nothing to see gets one row without a post. So the caller's check
    // (auth.ts, `callerFoundBy`) and the page are one statement, one round trip.
    return knex
      .with('viewer', knex('users').select('id').where('id', param('userId')))
      .select('viewer.id as viewer_id', 'listed.*')
      .from('viewer')
      .leftJoin(listed.as('listed'), knex.raw('true'))
      .orderBy(NEWEST_FIRST.map((o) => ({ column: `listed.${o.column}`, order: o.order })));
  });
}

const listKey = (kind: ViewerKind, search: boolean, cursor: boolean) =>
  `${kind}/${String(search)}/${String(cursor)}`;

const LIST_STATEMENTS = new Map(
  (['public', 'user'] as const).flatMap((kind) =>
    [false, true].flatMap((search) =>
      [false, true].map(
        (cursor) => [listKey(kind, search, cursor), buildListStatement(kind, search, cursor)] as const,
      ),
    ),
  ),
);

/** The list statement of a viewer's kind, with or without a search and a cursor. */
export function listStatement(kind: ViewerKind, search: boolean, cursor: boolean): Statement<ListParams> {
  const found = LIST_STATEMENTS.get(listKey(kind, search, cursor));
  if (!found) throw new Error(`no list statement for ${listKey(kind, search, cursor)}`);
  return found;
}

/**
 * Where a read runs: `standby` lets it go to a standby within the lag bound (db/standbys.ts), for
 * callers who have no writes of their own to miss; `primary` always reads there.
 */
export type ReadTarget = 'primary' | 'standby';

/**
 * A page of the posts the viewer may see. For a signed-in viewer, undefined when their user does
 * not exist (any more): the statement looks the viewer up with the page.
 */
export async function listPosts(
  db: Database,
  viewer: 'public',
  query: ListQuery,
  on?: ReadTarget,
): Promise<ListPage>;
export async function listPosts(
  db: Database,
  viewer: Viewer,
  query: ListQuery,
  on?: ReadTarget,
): Promise<ListPage | undefined>;
export async function listPosts(
  db: Database,
  viewer: Viewer,
  query: ListQuery,
  on: ReadTarget = 'primary',
): Promise<ListPage | undefined> {
  const after = query.cursor;
  // An empty search filters nothing.
  const search = query.search ? likeSubstring(query.search) : undefined;
  const pageStatement = listStatement(viewerKind(viewer), search !== undefined, after !== undefined);
  const rows = await (on === 'standby' ? db.reads : db).run<ListRow, ListParams>(pageStatement, {
    ...viewerParams(viewer),
    ...(search === undefined ? {} : { search }),
    ...(after ? { afterMicros: after.micros, afterId: after.id } : {}),
    limitPlusOne: query.limit + 1,
    limit: query.limit,
    offset: query.skip ?? 0,
  });
  if (viewer !== 'public' && rows.length === 0) return undefined;
  // A signed-in viewer with an empty page still gets their own row, without a post.
  const posts = rows.filter(isPost);
  const last = posts.at(-1);
  return {
    posts: posts.map(viewer === 'public' ? toPublicPost : toPost),
    next: last?.has_more ? { micros: last.position_micros, id: last.id } : undefined,
  };
}

export const postStatements = statementPerViewerKind<{ id: number }>('post', (knex, param, viewer) =>
  withOwnerAndVotes(
    knex,
    knex('posts')
      .select(...POST_COLUMNS)
      .where('id', param('id'))
      .modify(visibleTo(viewer)),
  ),
);

/** A post the viewer may see, or undefined (missing and invisible look the same). */
export async function getPost(db: Database, id: number, viewer: Viewer): Promise<Post | undefined> {
  const rows = await runForViewer<PostWithOwnerRow, { id: number }>(db, postStatements, viewer, { id });
  return rows[0] && toPost(rows[0]);
}

export const postOwnerStatements = statementPerViewerKind<{ id: number }>(
  'post_owner',
  (knex, param, viewer) => knex('posts').select('user_id').where('id', param('id')).modify(visibleTo(viewer)),
);

/**
 * The owner of a post the viewer may see, or undefined: another user's draft is as absent as a
 * missing post. Reading, changing and voting all ask this (through visibleTo), so the rule is
 * written once.
 */
export async function visiblePostOwner(
  db: Database,
  id: number,
  viewer: Viewer,
): Promise<number | undefined> {
  const rows = await runForViewer<Pick<PostRow, 'user_id'>, { id: number }>(db, postOwnerStatements, viewer, {
    id,
  });
  return rows[0]?.user_id;
}

/**
 * The post `id` as `userId`'s user may see it, as a query another feature's statement reads from
 * (voting inserts its vote from it), so the rule stays written once.
 */
export const visiblePost = (knex: Knex, id: number, userId: number): Knex.QueryBuilder =>
  knex('posts').where('id', id).modify(visibleTo({ userId }));

/** A request's `Idempotency-Key`, and the digest of what it asked, which a retry must repeat. */
export interface IdempotencyKey {
  key: string;
  digest: string;
}

/** The unique index on a post's user and key (migration 20261129000011). */
const IDEMPOTENCY_INDEX = 'posts_user_id_idempotency_key_unique';

/**
 * The new post, or undefined when its owner's user was deleted after the caller was looked up.
 * With an `idempotency` key the owner used before, no post is made: the answer is the post that key
 * made (as it is now), or `key-reused` when that request asked for another post.
 */
export async function createPost(
  db: Database,
  owner: User,
  input: PostInput,
  idempotency?: IdempotencyKey,
): Promise<Post | 'key-reused' | undefined> {
  let row: PostRow | undefined;
  try {
    [row] = await db
      .knex<PostRow>('posts')
      .insert({
        title: input.title,
        content: input.content,
        published: input.published,
        user_id: owner.id,
        ...(idempotency && { idempotency_key: idempotency.key, idempotency_digest: idempotency.digest }),
      })
      .returning<PostRow[]>([...POST_COLUMNS]);
  } catch (error) {
    if (brokenConstraint(error, '23503') === 'posts_user_id_foreign') return undefined;
    if (idempotency && brokenConstraint(error, '23505') === IDEMPOTENCY_INDEX) {
      const earlier = await readConfirmed(db, (trx) => postMadeWith(trx, owner.id, idempotency.key));
      // Deleted since the insert met it: the key is free again, and this request makes the post.
      if (!earlier) return createPost(db, owner, input, idempotency);
      return earlier.idempotency_digest === idempotency.digest ? toPost(earlier) : 'key-reused';
    }
    throw error;
  }
  if (!row) throw new Error('insert returned no row');
  return { ...row, owner: { id: owner.id, email: owner.email, created_at: owner.created_at }, votes: 0 };
}

/**
 * The post `userId` made with `key`, with the digest of the request that made it, locked in `trx`:
 * a retry answers with it once the synchronous standby has it (readConfirmed).
 */
async function postMadeWith(
  trx: Knex.Transaction,
  userId: number,
  key: string,
): Promise<(PostWithOwnerRow & { idempotency_digest: string }) | undefined> {
  const rows = (await withOwnerAndVotes(
    trx,
    trx('posts')
      .select(...POST_COLUMNS, 'idempotency_digest')
      .where({ user_id: userId, idempotency_key: key })
      // The oldest, which migration 20261129000011 keeps should a duplicate slip in while it builds its index.
      .orderBy('id')
      .limit(1)
      .forKeyShare(),
  )) as (PostWithOwnerRow & { idempotency_digest: string })[];
  return rows[0];
}

/** What a change asked under a condition on the post (conditionalChange) came to. */
export type ConditionalOutcome<T> =
  { done: true; result: T } | { done: false; why: 'missing' | 'not-owner' | 'precondition' };

/**
 * Changes a post only if `holds` says yes to it as its owner reads it now (the post GET answers):
 * the post's row is locked first, so no other change, vote or edit, comes between the check and
 * `change`, and of two editors holding the same ETag only the first wins. A post the caller cannot
 * see is `missing`, one they see but do not own `not-owner`; `change` runs in the same transaction.
 * The lock writes to the WAL, so even a 412 comes after a commit that waited for the synchronous
 * standby: what moved the tag (this caller's own change, resent after a 503) is confirmed by then.
 */
export async function conditionalChange<T>(
  db: Database,
  id: number,
  userId: number,
  holds: (post: Post) => boolean,
  change: (trx: Knex.Transaction) => Promise<T>,
): Promise<ConditionalOutcome<T>> {
  // A deadlock with a vote or another change fails the whole transaction, which is tried again.
  return retryingRaces(() =>
    db.knex.transaction(async (trx) => {
      const locked = (await trx('posts')
        .select('id')
        .where('id', id)
        .modify(visibleTo({ userId }))
        .forUpdate()) as { id: number }[];
      if (locked.length === 0) return { done: false, why: 'missing' };
      // A statement of its own, after the lock: it reads the row as the last change left it.
      const rows = (await withOwnerAndVotes(
        trx,
        trx('posts')
          .select(...POST_COLUMNS)
          .where('id', id),
      )) as PostWithOwnerRow[];
      const row = rows[0];
      if (!row) return { done: false, why: 'missing' };
      if (row.user_id !== userId) return { done: false, why: 'not-owner' };
      if (!holds(toPost(row))) return { done: false, why: 'precondition' };
      return { done: true, result: await change(trx) };
    }),
  );
}

/**
 * The post as changed, read by the statement that changes it, so an answer never rests on a read
 * after the commit that the request's budget could refuse; undefined when it vanished meanwhile.
 */
export async function updatePost(
  db: Database | Knex.Transaction,
  id: number,
  input: PostInput,
): Promise<Post | undefined> {
  const knex = typeof db === 'function' ? db : db.knex;
  const changed = knex<PostRow>('posts')
    .where({ id })
    .update({ title: input.title, content: input.content, published: input.published })
    .returning([...POST_COLUMNS]);
  const [row] = (await withOwnerAndVotes(knex, changed)) as PostWithOwnerRow[];
  return row && toPost(row);
}

/** True, or undefined when the post vanished meanwhile. */
export async function deletePost(db: Database | Knex.Transaction, id: number): Promise<true | undefined> {
  const knex = typeof db === 'function' ? db : db.knex;
  // RETURNING rather than the affected-row count: knex-pglite reports a delete's count differently.
  const deleted = await knex('posts').where({ id }).delete().returning('id');
  return deleted.length > 0 || undefined;
}
