import type { Knex } from 'knex';
import type { Database } from '../database';
import type { User } from '../users/users.repository';
import { decodeCursor, type Position } from './posts.cursor';
import type { ListQuery, PostInput } from './posts.schemas';

interface PostRow {
  id: number;
  title: string;
  content: string;
  published: boolean;
  created_at: Date;
  user_id: number;
}

/** The one post shape every endpoint returns: the row with its owner and vote total. */
export interface Post extends PostRow {
  owner: User;
  votes: number;
}

interface PostWithOwnerRow extends PostRow {
  owner_email: string;
  owner_created_at: Date;
  votes: number;
}

/** Who is looking: an authenticated caller also sees their own drafts; the public sees published posts. */
export type Viewer = { userId: number } | 'public';

/** The visibility rule, as SQL: published posts, and for a signed-in viewer their own drafts too. */
function visibleTo(viewer: Viewer) {
  return (q: Knex.QueryBuilder) => {
    if (viewer === 'public') void q.where('published', true);
    else
      void q.where((w) => {
        void w.where('published', true).orWhere('user_id', viewer.userId);
      });
  };
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
 * Adds owner and vote count to a set of post rows. Votes are counted per post in the outer select,
 * so only the rows of the page are counted, never the whole votes table.
 */
function withOwnerAndVotes(db: Database, rows: Knex.QueryBuilder): Knex.QueryBuilder {
  return db.knex
    .with('page', rows)
    .select(
      'page.*',
      'u.email as owner_email',
      'u.created_at as owner_created_at',
      db.knex.raw('(SELECT count(*)::int FROM votes v WHERE v.post_id = page.id) AS votes'),
    )
    .from('page')
    .join('users as u', 'u.id', 'page.user_id');
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

/** A list page, and the position after its last post when more posts follow. */
export interface ListPage {
  posts: Post[];
  next?: Position;
}

/**
 * Everything a list query varies by. The SQL text depends only on the viewer's kind (public or
 * signed in), whether there is a search and whether there is a cursor; everything else is a bound
 * value, so each of those eight shapes is one fixed statement.
 */
interface ListParams {
  viewer: Viewer;
  search?: string;
  after?: Position;
  limit: number;
  offset: number;
}

/**
 * The one place the list SQL is built. The page CTE reads limit + 1 rows (the extra one only tells
 * whether another page follows); the outer query keeps `limit` of them, so votes are counted for
 * the page's posts only (PostgreSQL evaluates the vote subquery after the sort and limit).
 * A cursor is a row-value comparison on (created_at, id), which the newest-first indexes answer
 * as an index condition; its timestamp is rebuilt from integer microseconds exactly.
 */
function listQuerySql(db: Database, p: ListParams): Knex.QueryBuilder {
  const page = db
    .knex<PostRow>('posts')
    .select('*', db.knex.raw(`(extract(epoch FROM created_at) * 1000000)::bigint::text AS position_micros`))
    .modify(visibleTo(p.viewer))
    .orderBy([...NEWEST_FIRST])
    .limit(p.limit + 1)
    .offset(p.offset);
  if (p.search) void page.whereILike('title', likeSubstring(p.search));
  if (p.after)
    void page.whereRaw(
      `(created_at, id) < (timestamptz 'epoch' + ?::bigint * interval '1 microsecond', ?::int)`,
      [p.after.micros, p.after.id],
    );
  return withOwnerAndVotes(db, page)
    .select(db.knex.raw('(SELECT count(*) FROM page) > ? AS has_more', [p.limit]))
    .orderBy(NEWEST_FIRST.map((o) => ({ column: `page.${o.column}`, order: o.order })))
    .limit(p.limit);
}

export async function listPosts(db: Database, viewer: Viewer, query: ListQuery): Promise<ListPage> {
  const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
  if (query.cursor !== undefined && !after) throw new Error('listPosts was given an unvalidated cursor');
  const rows = (await listQuerySql(db, {
    viewer,
    search: query.search,
    after,
    limit: query.limit,
    offset: query.skip,
  })) as (PostWithOwnerRow & { position_micros: string; has_more: boolean })[];
  const last = rows.at(-1);
  return {
    posts: rows.map(toPost),
    next: last?.has_more ? { micros: last.position_micros, id: last.id } : undefined,
  };
}

/** A post the viewer may see, or undefined (missing and invisible look the same). */
export async function getPost(db: Database, id: number, viewer: Viewer): Promise<Post | undefined> {
  const rows = (await withOwnerAndVotes(
    db,
    db.knex('posts').select('*').where({ id }).modify(visibleTo(viewer)),
  )) as PostWithOwnerRow[];
  return rows[0] && toPost(rows[0]);
}

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
  const row = await db
    .knex<PostRow>('posts')
    .select('user_id')
    .where({ id })
    .modify(visibleTo(viewer))
    .first<Pick<PostRow, 'user_id'> | undefined>();
  return row?.user_id;
}

export async function createPost(db: Database, owner: User, input: PostInput): Promise<Post> {
  const [row] = await db
    .knex<PostRow>('posts')
    .insert({ title: input.title, content: input.content, published: input.published, user_id: owner.id })
    .returning<PostRow[]>('*');
  if (!row) throw new Error('insert returned no row');
  return { ...row, owner: { id: owner.id, email: owner.email, created_at: owner.created_at }, votes: 0 };
}

/** Returns false when the post vanished meanwhile. */
export async function updatePost(db: Database, id: number, input: PostInput): Promise<boolean> {
  const count = await db
    .knex<PostRow>('posts')
    .where({ id })
    .update({ title: input.title, content: input.content, published: input.published });
  return count > 0;
}

export async function deletePost(db: Database, id: number): Promise<boolean> {
  // RETURNING rather than the affected-row count: knex-pglite reports a delete's count differently.
  const deleted = await db.knex('posts').where({ id }).delete().returning('id');
  return deleted.length > 0;
}
