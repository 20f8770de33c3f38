/**
 * A caller whose user is deleted while their write is under way (after the request looked them
 * up) gets 401 "Could not validate credentials", as any token whose user no longer exists, never
 * a 500. The deletion is made to land at the worst moment by a trigger that deletes the writing
 * user just before the row is written.
 */
import request from 'supertest';
import { pollUntil } from '../../tools/harness/poll';
import { countOf } from '../../tools/harness/postgres';
import {
  bearer,
  expectProblem,
  newAccount,
  newPost,
  postsFixture,
  testOnPostgres,
  type Account,
  vote,
} from './helpers';

const { service, owner } = postsFixture(['owner']);

const api = () => request(service.app);

/**
 * Sends `write` under a BEFORE trigger on `table` for `event` that first deletes the user the row
 * belongs to (or, with `deletes: 'post'`, only the post), and returns its answer; the trigger goes
 * after it. `skip`: the trigger then drops the write itself, as a write that finds its row gone
 * does (the deletes it sets off, one level down, pass).
 */
async function deleteBefore(
  table: 'posts' | 'votes',
  event: 'INSERT' | 'UPDATE' | 'DELETE',
  { skip, deletes = 'user' }: { skip: boolean; deletes?: 'user' | 'post' },
  write: () => request.Test,
): Promise<request.Response> {
  const row = event === 'DELETE' ? 'OLD' : 'NEW';
  const knex = service.db.knex;
  const remove =
    deletes === 'user'
      ? `DELETE FROM users WHERE id = ${row}.user_id`
      : `DELETE FROM posts WHERE id = ${row}.id`;
  await knex.raw(`
    CREATE FUNCTION test_delete_first() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF pg_trigger_depth() > 1 THEN RETURN ${row}; END IF;
      ${remove};
      RETURN ${skip ? 'NULL' : row};
    END
    $$`);
  await knex.raw(
    `CREATE TRIGGER test_delete_first BEFORE ${event} ON ${table} FOR EACH ROW EXECUTE FUNCTION test_delete_first()`,
  );
  try {
    return await write();
  } finally {
    await knex.raw(`DROP TRIGGER test_delete_first ON ${table}`);
    await knex.raw('DROP FUNCTION test_delete_first()');
  }
}

function expectUnknownCaller(res: request.Response): void {
  expect(expectProblem(res, 401).detail).toBe('Could not validate credentials');
  expect(res.headers['www-authenticate']).toBe('Bearer');
}

const userExists = async (account: Account): Promise<boolean> =>
  (await service.db.knex('users').where('id', account.user.id)).length > 0;

test('When the caller is deleted just before their new post is inserted, then 401, not 500, and no post is left', async () => {
  const doomed = await newAccount(service.app);
  const res = await deleteBefore('posts', 'INSERT', { skip: false }, () =>
    api().post('/posts/').set(bearer(doomed)).send({ title: 'last words', content: 'c' }),
  );
  expectUnknownCaller(res);
  // The failed insert takes the trigger's delete back with it; a real concurrent delete stays.
  expect(await service.db.knex('posts').where('user_id', doomed.user.id)).toEqual([]);
});

test('When the caller is deleted just before their vote is inserted, then 401, not 500, and the post keeps its count', async () => {
  const post = await newPost(service.app, owner);
  const doomed = await newAccount(service.app);
  const res = await deleteBefore('votes', 'INSERT', { skip: false }, () =>
    vote(service.app, doomed, post.id, 1),
  );
  expectUnknownCaller(res);
  const read = await api().get(`/posts/${post.id}`).set(bearer(owner)).expect(200);
  expect((read.body as { votes: number }).votes).toBe(0);
});

test('When the caller is deleted (their votes with them) just before their vote is withdrawn, then 401, not 404', async () => {
  const post = await newPost(service.app, owner);
  const doomed = await newAccount(service.app);
  await vote(service.app, doomed, post.id, 1).expect(201);
  const res = await deleteBefore('votes', 'DELETE', { skip: true }, () =>
    vote(service.app, doomed, post.id, 0),
  );
  expectUnknownCaller(res);
  expect(await userExists(doomed)).toBe(false);
  const read = await api().get(`/posts/${post.id}`).set(bearer(owner)).expect(200);
  expect((read.body as { votes: number }).votes).toBe(0);
});

/** The post's ETag as its owner reads it now, for an If-Match. */
const etagOf = async (account: Account, postId: number): Promise<string> =>
  String((await api().get(`/posts/${postId}`).set(bearer(account)).expect(200)).headers.etag);

/** A PUT or DELETE of the post as `account`, with `If-Match: tag` when given (sent once awaited). */
function change(method: 'PUT' | 'DELETE', account: Account, postId: number, tag?: string): request.Test {
  const req = method === 'PUT' ? api().put(`/posts/${postId}`) : api().delete(`/posts/${postId}`);
  req.set(bearer(account));
  if (tag !== undefined) req.set('If-Match', tag);
  return req.send({ title: 'edited', content: 'c' });
}

const CHANGES = [
  ['PUT', 'PUT', 'UPDATE', false],
  ['DELETE', 'DELETE', 'DELETE', false],
  ['conditional (If-Match) PUT', 'PUT', 'UPDATE', true],
  ['conditional (If-Match) DELETE', 'DELETE', 'DELETE', true],
] as const;

test.each(CHANGES)(
  'When the caller is deleted (their posts with them) just before their %s lands, then 401, not 404 or 412',
  async (_what, method, event, conditional) => {
    const doomed = await newAccount(service.app);
    const post = await newPost(service.app, doomed);
    const tag = conditional ? await etagOf(doomed, post.id) : undefined;
    const res = await deleteBefore('posts', event, { skip: true }, () =>
      change(method, doomed, post.id, tag),
    );
    expectUnknownCaller(res);
    expect(await userExists(doomed)).toBe(false);
  },
);

test.each(CHANGES)(
  'When only the post is gone before a %s lands (its owner remains), then 404 as before',
  async (_what, method, event, conditional) => {
    const author = await newAccount(service.app);
    const post = await newPost(service.app, author);
    const tag = conditional ? await etagOf(author, post.id) : undefined;
    // Deleted between the ownership check and the write: the post alone, its owner kept.
    const res = await deleteBefore('posts', event, { skip: true, deletes: 'post' }, () =>
      change(method, author, post.id, tag),
    );
    expect(expectProblem(res, 404).detail).toBe(`post with id: ${post.id} was not found`);
    expect(await userExists(author)).toBe(true);
  },
);

/**
 * Sends `write` while another transaction holds `posts` locked, so the write has looked its
 * caller up and waits at its first read of the posts; deletes the caller (their posts and votes
 * with them) in that transaction, commits, and returns the answer. PostgreSQL only: PGlite has one
 * session, so the write could not run beside the lock.
 */
async function deletedWhileWaiting(doomed: Account, write: () => request.Test): Promise<request.Response> {
  const knex = service.db.knex;
  const holder = await knex.transaction();
  let answer: Promise<request.Response> | undefined;
  try {
    await holder.raw('LOCK TABLE posts IN ACCESS EXCLUSIVE MODE');
    // Awaiting a supertest request is what sends it.
    answer = Promise.resolve(write());
    const waiting = await pollUntil(
      () => countOf(knex, "pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"),
      (n) => n > 0,
      { withinMs: 1500, everyMs: 10 },
    );
    expect(waiting.held).toBe(true);
    await holder('users').where('id', doomed.user.id).delete();
    await holder.commit();
  } finally {
    if (!holder.isCompleted()) await holder.rollback();
  }
  return answer;
}

testOnPostgres.each([
  ['a vote on their own draft', 'vote-draft'],
  ['withdrawing a vote they never cast', 'withdraw'],
  ['a PUT of their post', 'put'],
  ['a DELETE of their post', 'delete'],
  ['a conditional (If-Match) PUT of their post', 'put-if-match'],
  ['a conditional (If-Match) DELETE of their post', 'delete-if-match'],
] as const)(
  'When the caller is deleted while %s waits to read the posts, then 401, not 404',
  async (_what, write) => {
    const doomed = await newAccount(service.app);
    const own = await newPost(service.app, doomed, { published: write !== 'vote-draft' });
    const others = await newPost(service.app, owner);
    const tag = await etagOf(doomed, own.id);
    const edit = { title: 'edited', content: 'c' };
    const res = await deletedWhileWaiting(doomed, () => {
      const as = bearer(doomed);
      switch (write) {
        case 'vote-draft':
          return vote(service.app, doomed, own.id, 1);
        case 'withdraw':
          return vote(service.app, doomed, others.id, 0);
        case 'put':
          return api().put(`/posts/${own.id}`).set(as).send(edit);
        case 'delete':
          return api().delete(`/posts/${own.id}`).set(as);
        case 'put-if-match':
          return api().put(`/posts/${own.id}`).set(as).set('If-Match', tag).send(edit);
        case 'delete-if-match':
          return api().delete(`/posts/${own.id}`).set(as).set('If-Match', tag);
      }
    });
    expectUnknownCaller(res);
    expect(await userExists(doomed)).toBe(false);
  },
);
