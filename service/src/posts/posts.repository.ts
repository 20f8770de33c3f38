import type { Knex } from 'knex';
import type { Database } from '../database';
import { statement } from '../statements';
import type { User } from '../users/users.repository';
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

/**
 * The visibility rule, as SQL: published posts, and for a signed-in viewer their own drafts too.
 * In a statement, the viewer's id is the statement's parameter (see statements.ts).
 */
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
function withOwnerAndVotes(knex: Knex, rows: Knex.QueryBuilder): Knex.QueryBuilder {
  return knex
    .with('page', rows)
    .select(
      'page.*',
      'u.email as owner_email',
      'u.created_at as owner_created_at',
      knex.raw('(SELECT count(*)::int FROM votes v WHERE v.post_id = page.id) AS votes'),
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

interface ListParams {
  limit: number;
  skip: number;
  userId?: number;
  search?: string;
}

/** One page of the list in the viewer's kind (public, or a signed-in user) with or without a search. */
function listStatement(kind: 'public' | 'user', search: boolean) {
  return statement<ListParams>(`posts_${kind}${search ? '_search' : ''}`, (knex, param) => {
    const page = knex('posts')
      .select('*')
      .modify(visibleTo(kind === 'public' ? 'public' : { userId: param('userId') }))
      .orderBy([...NEWEST_FIRST])
      .limit(param('limit'))
      .offset(param('skip'));
    if (search) void page.whereILike('title', param('search') as unknown as string);
    return withOwnerAndVotes(knex, page).orderBy(
      NEWEST_FIRST.map((o) => ({ column: `page.${o.column}`, order: o.order })),
    );
  });
}

const LIST = {
  public: { plain: listStatement('public', false), search: listStatement('public', true) },
  user: { plain: listStatement('user', false), search: listStatement('user', true) },
};

export async function listPosts(db: Database, viewer: Viewer, query: ListQuery): Promise<Post[]> {
  const shapes = viewer === 'public' ? LIST.public : LIST.user;
  const rows = await db.run<PostWithOwnerRow, ListParams>(query.search ? shapes.search : shapes.plain, {
    limit: query.limit,
    skip: query.skip,
    ...(viewer === 'public' ? {} : { userId: viewer.userId }),
    ...(query.search ? { search: likeSubstring(query.search) } : {}),
  });
  return rows.map(toPost);
}

const postFor = {
  public: statement<{ id: number }>('post_public', (knex, param) =>
    withOwnerAndVotes(knex, knex('posts').select('*').where('id', param('id')).modify(visibleTo('public'))),
  ),
  user: statement<{ id: number; userId: number }>('post_for_user', (knex, param) =>
    withOwnerAndVotes(
      knex,
      knex('posts')
        .select('*')
        .where('id', param('id'))
        .modify(visibleTo({ userId: param('userId') })),
    ),
  ),
};

/** A post the viewer may see, or undefined (missing and invisible look the same). */
export async function getPost(db: Database, id: number, viewer: Viewer): Promise<Post | undefined> {
  const rows =
    viewer === 'public'
      ? await db.run<PostWithOwnerRow, { id: number }>(postFor.public, { id })
      : await db.run<PostWithOwnerRow, { id: number; userId: number }>(postFor.user, {
          id,
          userId: viewer.userId,
        });
  return rows[0] && toPost(rows[0]);
}

const ownerFor = {
  public: statement<{ id: number }>('post_owner_public', (knex, param) =>
    knex('posts').select('user_id').where('id', param('id')).modify(visibleTo('public')),
  ),
  user: statement<{ id: number; userId: number }>('post_owner_for_user', (knex, param) =>
    knex('posts')
      .select('user_id')
      .where('id', param('id'))
      .modify(visibleTo({ userId: param('userId') })),
  ),
};

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
  const rows =
    viewer === 'public'
      ? await db.run<Pick<PostRow, 'user_id'>, { id: number }>(ownerFor.public, { id })
      : await db.run<Pick<PostRow, 'user_id'>, { id: number; userId: number }>(ownerFor.user, {
          id,
          userId: viewer.userId,
        });
  return rows[0]?.user_id;
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
