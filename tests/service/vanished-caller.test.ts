/**
 * A caller whose user is deleted while their write is under way (after the request looked them
 * up) gets 401 "Could not validate credentials", as any token whose user no longer exists, never
 * a 500. The deletion is made to land at the worst moment by a trigger that deletes the writing
 * user just before the row is written.
 */
import request from 'supertest';
import { bearer, expectProblem, newAccount, newPost, postsFixture, type Account } from './helpers';

const { service, owner } = postsFixture(['owner']);

const api = () => request(service.app);

/**
 * A BEFORE trigger on `table` for `event` that first deletes the user the row belongs to (or, with
 * `deletes: 'post'`, only the post). `skip`: the trigger then drops the write itself, as a write
 * that finds its row gone does (the deletes it sets off, one level down, pass).
 */
async function deleteBefore(
  table: 'posts' | 'votes',
  event: 'INSERT' | 'UPDATE' | 'DELETE',
  { skip, deletes = 'user' }: { skip: boolean; deletes?: 'user' | 'post' },
): Promise<() => Promise<void>> {
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
  return async () => {
    await knex.raw(`DROP TRIGGER test_delete_first ON ${table}`);
    await knex.raw('DROP FUNCTION test_delete_first()');
  };
}

function expectUnknownCaller(res: request.Response): void {
  expect(expectProblem(res, 401).detail).toBe('Could not validate credentials');
  expect(res.headers['www-authenticate']).toBe('Bearer');
}

const userExists = async (account: Account): Promise<boolean> =>
  (await service.db.knex('users').where('id', account.user.id)).length > 0;

test('When the caller is deleted just before their new post is inserted, then 401, not 500, and no post is left', async () => {
  const doomed = await newAccount(service.app);
  const drop = await deleteBefore('posts', 'INSERT', { skip: false });
  let res: request.Response;
  try {
    res = await api().post('/posts/').set(bearer(doomed)).send({ title: 'last words', content: 'c' });
  } finally {
    await drop();
  }
  expectUnknownCaller(res);
  // The failed insert takes the trigger's delete back with it; a real concurrent delete stays.
  expect(await service.db.knex('posts').where('user_id', doomed.user.id)).toEqual([]);
});

test('When the caller is deleted just before their vote is inserted, then 401, not 500, and the post keeps its count', async () => {
  const post = await newPost(service.app, owner);
  const doomed = await newAccount(service.app);
  const drop = await deleteBefore('votes', 'INSERT', { skip: false });
  let res: request.Response;
  try {
    res = await api().post('/votes/').set(bearer(doomed)).send({ post_id: post.id, dir: 1 });
  } finally {
    await drop();
  }
  expectUnknownCaller(res);
  const read = await api().get(`/posts/${post.id}`).set(bearer(owner)).expect(200);
  expect((read.body as { votes: number }).votes).toBe(0);
});

test.each([
  ['PUT', 'UPDATE'],
  ['DELETE', 'DELETE'],
] as const)(
  'When the caller is deleted (their posts with them) just before their %s lands, then 401, not 404',
  async (method, event) => {
    const doomed = await newAccount(service.app);
    const post = await newPost(service.app, doomed);
    const drop = await deleteBefore('posts', event, { skip: true });
    let res: request.Response;
    try {
      const req = method === 'PUT' ? api().put(`/posts/${post.id}`) : api().delete(`/posts/${post.id}`);
      res = await req.set(bearer(doomed)).send({ title: 'edited', content: 'c' });
    } finally {
      await drop();
    }
    expectUnknownCaller(res);
    expect(await userExists(doomed)).toBe(false);
  },
);

test.each(['PUT', 'DELETE'] as const)(
  'When only the post is gone before a %s lands (its owner remains), then 404 as before',
  async (method) => {
    const author = await newAccount(service.app);
    const post = await newPost(service.app, author);
    // Deleted between the ownership check and the write: the post alone, its owner kept.
    const drop = await deleteBefore('posts', method === 'PUT' ? 'UPDATE' : 'DELETE', {
      skip: true,
      deletes: 'post',
    });
    let res: request.Response;
    try {
      const req = method === 'PUT' ? api().put(`/posts/${post.id}`) : api().delete(`/posts/${post.id}`);
      res = await req.set(bearer(author)).send({ title: 'edited', content: 'c' });
    } finally {
      await drop();
    }
    expect(expectProblem(res, 404).detail).toBe(`post with id: ${post.id} was not found`);
    expect(await userExists(author)).toBe(true);
  },
);
