import request from 'supertest';
import {
  bearer,
  connectionBeside,
  describeOnPostgres,
  documentedAs,
  expectProblem,
  newAccount,
  newPost,
  newPosts,
  uniqueToken,
  type Account,
  type PostBody,
  postsFixture,
  rowsOf,
  vote,
} from './helpers';
import { MAX_ID } from '../../service/src/db/limits';
import { waitFor } from '../../tools/harness/poll';
import { countOf } from '../../tools/harness/postgres';

const POST_KEYS = ['content', 'created_at', 'id', 'owner', 'published', 'title', 'user_id', 'votes'];
const OWNER_KEYS = ['created_at', 'email', 'id'];
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
/** The largest id a column holds: no test gets that far, so no post has it. */
const MISSING_ID = MAX_ID;

const token = (): string => uniqueToken('t');

const { service, alice, bob } = postsFixture(['alice', 'bob']);

const api = () => request(service.app);

const getPost = (account: Account, id: number) => api().get(`/posts/${id}`).set(bearer(account));
/** A POST of `body` to the collection (at `path`) as `account`. */
const create = (body: object, account = alice, path = '/posts/') =>
  api().post(path).set(bearer(account)).send(body);
const replace = (id: number, body: object, account = alice) =>
  api().put(`/posts/${id}`).set(bearer(account)).send(body);
const titleOf = async (id: number) => ((await getPost(alice, id)).body as PostBody).title;

/** The posts a list answers 200 with, asked as `account` when given. */
const list = async (path: string, account?: Account): Promise<PostBody[]> =>
  (await (account ? api().get(path).set(bearer(account)) : api().get(path)).expect(200)).body as PostBody[];

const listIds = async (path: string, account?: Account): Promise<number[]> =>
  (await list(path, account)).map((p) => p.id);

const searchPath = (base: string, search: string, extra = ''): string =>
  `${base}?search=${encodeURIComponent(search)}${extra}`;

/** A post on the public feed: the same shape, its owner without an e-mail address (the specification). */
function expectPublicPostShape(body: PostBody, owner: Account): void {
  expect(Object.keys(body).sort()).toEqual(POST_KEYS);
  expect(body.owner).toEqual({ id: owner.user.id, created_at: owner.user.created_at as unknown as string });
  expect(JSON.stringify(body)).not.toContain(owner.user.email);
}

function expectPostShape(body: PostBody, owner: Account): void {
  expect(Object.keys(body).sort()).toEqual(POST_KEYS);
  expect(Object.keys(body.owner).sort()).toEqual(OWNER_KEYS);
  expect(typeof body.id).toBe('number');
  expect(Number.isInteger(body.id)).toBe(true);
  expect(body.created_at).toMatch(ISO_UTC);
  expect(new Date(body.created_at).toISOString()).toBe(body.created_at);
  expect(body.user_id).toBe(owner.user.id);
  expect(body.owner).toEqual({
    id: owner.user.id,
    email: owner.user.email,
    created_at: owner.user.created_at as unknown as string,
  });
  expect(body.owner.created_at).toMatch(ISO_UTC);
  expect(JSON.stringify(body)).not.toMatch(/password|\$2[aby]\$/);
}

describe('POST /posts/', () => {
  test('When an authenticated user creates a post, then 201 returns exactly the post with its owner and 0 votes', async () => {
    const title = `Created ${token()}`;
    const before = Date.now();
    const res = await create({ title, content: 'Body text', published: false }).expect(201);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const body = res.body as PostBody;
    expectPostShape(body, alice);
    expect(body).toMatchObject({ title, content: 'Body text', published: false, votes: 0 });
    expect(Math.abs(new Date(body.created_at).getTime() - before)).toBeLessThan(60_000);

    expect((await getPost(alice, body.id).expect(200)).body).toEqual(body);
  });

  test('When published is omitted on create, then the post is published and appears in the public list', async () => {
    const title = `Default published ${token()}`;
    const body = await newPost(service.app, alice, { title, content: 'x' });
    expect(body.published).toBe(true);
    expect(await listIds(searchPath('/posts/public', title))).toEqual([body.id]);
  });

  test('When the collection is addressed without the trailing slash, then the post is created too', async () => {
    const res = await create({ title: `No slash ${token()}`, content: 'x' }, alice, '/posts').expect(201);
    expectPostShape(res.body as PostBody, alice);
  });

  test('When unknown fields are sent on create, then they are ignored', async () => {
    const extra = { id: 999_999, votes: 42, user_id: bob.user.id, title: `Extra ${token()}`, content: 'x' };
    const res = await create(extra).expect(201);
    const body = res.body as PostBody;
    expectPostShape(body, alice);
    expect(body.id).not.toBe(999_999);
    expect(body.votes).toBe(0);
  });

  test('When title and content carry tabs, line breaks, 3-byte characters and emoji, then 201 and they come back exactly', async () => {
    const title = `${token()}\t\u20ac \u{1F600}`;
    const content = 'line one\r\nline two\n\ttabbed \u20ac\u2028\u{1F600}';
    const { id } = await newPost(service.app, alice, { title, content });
    const read = (await getPost(alice, id)).body as PostBody;
    expect([read.title, read.content]).toEqual([title, content]);
  });

  test('When the content has a control character, then the 422 says which characters are refused', async () => {
    const res = await create({ title: 'x', content: 'a\u0001b' });
    expect(expectProblem(res, 422).errors).toEqual([
      {
        field: 'content',
        message: 'content must not contain control characters other than tab, line feed and carriage return',
      },
    ]);
  });

  test('When a title of exactly 300 characters and content of exactly 20,000 are sent, then 201', async () => {
    const title = `${token()} `.padEnd(300, 'x');
    const content = 'c'.repeat(20_000);
    const body = await newPost(service.app, alice, { title, content });
    expect(body.title).toBe(title);
    expect(body.content).toBe(content);
  });

  test('When the content is whitespace alone, then 201 and it is kept as sent: only a title must not be blank', async () => {
    const body = await newPost(service.app, alice, { title: `Spaces ${token()}`, content: ' \n\t ' });
    expect(body.content).toBe(' \n\t ');
  });

  const invalidBodies: [string, Record<string, unknown>, string][] = [
    ['title is missing', { content: 'x' }, 'title'],
    ['content is missing', { title: 'x' }, 'content'],
    ['title is blank', { title: '   ', content: 'x' }, 'title'],
    ['title is empty', { title: '', content: 'x' }, 'title'],
    ['content is empty', { title: 'x', content: '' }, 'content'],
    ['title has 301 characters', { title: 'a'.repeat(301), content: 'x' }, 'title'],
    ['content has 20,001 characters', { title: 'x', content: 'c'.repeat(20_001) }, 'content'],
    ['title contains a NUL character', { title: 'a\u0000b', content: 'x' }, 'title'],
    ['content contains a NUL character', { title: 'x', content: 'a\u0000b' }, 'content'],
    ['title contains an escape character (ESC)', { title: 'a\u001b[31mb', content: 'x' }, 'title'],
    ['content contains U+0001', { title: 'x', content: 'a\u0001b' }, 'content'],
    ['content contains DEL', { title: 'x', content: 'a\u007fb' }, 'content'],
    ['content contains a C1 control (U+0085)', { title: 'x', content: 'a\u0085b' }, 'content'],
    ['title contains a lone high surrogate', { title: 'a\ud800b', content: 'x' }, 'title'],
    ['content contains a lone low surrogate', { title: 'x', content: '\udfffa' }, 'content'],
    ['published is not a boolean', { title: 'x', content: 'y', published: 'yes' }, 'published'],
    ['published is the string "true"', { title: 'x', content: 'y', published: 'true' }, 'published'],
    ['title is a number', { title: 42, content: 'x' }, 'title'],
    ['content is null', { title: 'x', content: null }, 'content'],
  ];

  test.each(invalidBodies)(
    'When %s, then 422 names the field and nothing is created',
    async (_label, payload, field) => {
      const newestBefore = await listIds('/posts/?limit=1', alice);
      const res = await create(payload);
      const problem = expectProblem(res, 422);
      expect(problem.errors?.map((e) => e.field)).toContain(field);
      expect(await listIds('/posts/?limit=1', alice)).toEqual(newestBefore);
    },
  );

  test('When the body is a JSON array, then 422', async () => {
    expectProblem(await create([{ title: 'x', content: 'y' }]), 422);
  });
});

describe('GET /posts/{id}', () => {
  test('When the post exists, then 200 returns the post in the one flat shape', async () => {
    const created = await newPost(service.app, alice, { title: `Get ${token()}` });
    const body = (await getPost(bob, created.id).expect(200)).body as PostBody;
    expectPostShape(body, alice);
    expect(body).toMatchObject({ id: created.id, title: created.title, published: true, votes: 0 });
  });

  test('When the caller asks for their own draft, then 200', async () => {
    const draft = await newPost(service.app, alice, { title: `Own draft ${token()}`, published: false });
    expect(((await getPost(alice, draft.id).expect(200)).body as PostBody).published).toBe(false);
  });

  test('When no token is sent, then 401', async () => {
    const created = await newPost(service.app, alice);
    const res = await api().get(`/posts/${created.id}`);
    expect(expectProblem(res, 401).detail).toBe('Not authenticated');
  });

  test('When the post does not exist, then 404 with a detail naming the id', async () => {
    const res = await getPost(alice, MISSING_ID);
    expect(expectProblem(res, 404).detail).toBe(`post with id: ${MISSING_ID} was not found`);
  });

  test("When the post is another user's draft, then 404 as if it did not exist", async () => {
    const draft = await newPost(service.app, alice, { title: `Hidden ${token()}`, published: false });
    const res = await getPost(bob, draft.id);
    expect(expectProblem(res, 404).detail).toBe(`post with id: ${draft.id} was not found`);
  });
});

describe('PUT /posts/{id}', () => {
  test('When the owner updates a post, then 200 returns the updated post and GET shows the change', async () => {
    const created = await newPost(service.app, alice, { title: `Before ${token()}` });
    const title = `After ${token()}`;
    const res = await replace(created.id, { title, content: 'New content', published: false }).expect(200);
    const body = res.body as PostBody;
    expectPostShape(body, alice);
    expect(body).toMatchObject({
      id: created.id,
      title,
      content: 'New content',
      published: false,
      votes: 0,
      created_at: created.created_at as unknown as string,
    });
    const fetched = await getPost(alice, created.id);
    expect(fetched.body).toEqual(body);
  });

  test('When published is omitted on update, then it becomes true again', async () => {
    const draft = await newPost(service.app, alice, { title: `Draft ${token()}`, published: false });
    const title = `Republished ${token()}`;
    const res = await replace(draft.id, { title, content: 'x' }).expect(200);
    expect((res.body as PostBody).published).toBe(true);
    expect(await listIds(searchPath('/posts/public', title))).toEqual([draft.id]);
  });

  test('When the body carries an id (and other unknown fields), then they are ignored', async () => {
    const target = await newPost(service.app, alice, { title: `Target ${token()}` });
    const other = await newPost(service.app, alice, { title: `Other ${token()}` });
    const extra = { id: other.id, user_id: bob.user.id, votes: 9, title: 'Renamed', content: 'x' };
    const res = await replace(target.id, extra).expect(200);
    expect(res.body).toMatchObject({ id: target.id, user_id: alice.user.id, votes: 0, title: 'Renamed' });
    expect(await titleOf(other.id)).toBe(other.title);
  });

  test('When the post keeps its votes through an update, then the total is still returned', async () => {
    const created = await newPost(service.app, alice, { title: `Voted ${token()}` });
    await vote(service.app, bob, created.id, 1).expect(201);
    const res = await replace(created.id, { title: 'x', content: 'y' }).expect(200);
    expect((res.body as PostBody).votes).toBe(1);
  });

  test.each<[string, Record<string, unknown>]>([
    ['title is missing', { content: 'x' }],
    ['title is blank', { title: '   ', content: 'x' }],
    ['title has 301 characters', { title: 'a'.repeat(301), content: 'x' }],
    ['content has 20,001 characters', { title: 'x', content: 'c'.repeat(20_001) }],
    ['title contains NUL', { title: '\u0000', content: 'x' }],
    ['content contains NUL', { title: 'x', content: 'ok\u0000' }],
    ['title contains U+0001', { title: 'a\u0001', content: 'x' }],
    ['content contains a lone surrogate', { title: 'x', content: 'ok\ud83d' }],
    ['published is not a boolean', { title: 'x', content: 'y', published: 1 }],
    ['title is a number', { title: 7, content: 'x' }],
  ])('When %s on update, then 422 and the post is unchanged', async (_label, payload) => {
    const title = `Stable ${token()}`;
    const created = await newPost(service.app, alice, { title });
    expectProblem(await replace(created.id, payload), 422);
    expect(await titleOf(created.id)).toBe(title);
  });
});

describe('DELETE /posts/{id}', () => {
  test('When the owner deletes a post, then 204 with an empty body and the post is gone', async () => {
    const title = `Doomed ${token()}`;
    const created = await newPost(service.app, alice, { title });
    const res = await api().delete(`/posts/${created.id}`).set(bearer(alice)).expect(204);
    expect(res.text).toBeFalsy();
    expect(res.headers['content-type']).toBeUndefined();
    expectProblem(await getPost(alice, created.id), 404);
    expect(await listIds(searchPath('/posts/', title), alice)).toEqual([]);
    expect(await listIds(searchPath('/posts/public', title))).toEqual([]);
    expectProblem(await api().delete(`/posts/${created.id}`).set(bearer(alice)), 404);
  });

  test('When a voted post is deleted, then its votes go with it and voting on its id is 404', async () => {
    const created = await newPost(service.app, alice, { title: `Voted doomed ${token()}` });
    await vote(service.app, bob, created.id, 1).expect(201);
    await vote(service.app, alice, created.id, 1).expect(201);
    expect(((await getPost(alice, created.id)).body as PostBody).votes).toBe(2);

    await api().delete(`/posts/${created.id}`).set(bearer(alice)).expect(204);

    const withdraw = await vote(service.app, bob, created.id, 0);
    expect(expectProblem(withdraw, 404).detail).toBe(`post with id: ${created.id} was not found`);
    const revote = await vote(service.app, bob, created.id, 1);
    expect(expectProblem(revote, 404).detail).toBe(`post with id: ${created.id} was not found`);
    expect(await countOf(service.db.knex, 'votes WHERE post_id = ?', [created.id])).toBe(0);
  });
});

describe.each(['PUT', 'DELETE'] as const)('%s /posts/{id} refused', (method) => {
  /** The method on the post `id`, as `account` when given; a PUT sends a valid body. */
  const change = (id: number | string, account?: Account) => {
    const req = method === 'PUT' ? api().put(`/posts/${id}`) : api().delete(`/posts/${id}`);
    if (account) void req.set(bearer(account));
    return method === 'PUT' ? req.send({ title: 'x', content: 'y' }) : req;
  };

  test('When no token is sent, then 401, before the id is read, and the post is unchanged', async () => {
    const title = `Kept ${token()}`;
    const created = await newPost(service.app, alice, { title });
    expect(expectProblem(await change(created.id), 401).detail).toBe('Not authenticated');
    expectProblem(await change('abc'), 401);
    expect(await titleOf(created.id)).toBe(title);
  });

  test("When another user sends it for someone's published post, then 403 and the post is unchanged", async () => {
    const title = `Alice only ${token()}`;
    const created = await newPost(service.app, alice, { title });
    expectProblem(await change(created.id, bob), 403);
    expect(await titleOf(created.id)).toBe(title);
  });

  test('When the post does not exist, then 404', async () => {
    expectProblem(await change(MISSING_ID, alice), 404);
  });

  test("When the post is another user's draft, then 404 and the draft is unchanged", async () => {
    const title = `Secret draft ${token()}`;
    const draft = await newPost(service.app, alice, { title, published: false });
    expectProblem(await change(draft.id, bob), 404);
    expect(await titleOf(draft.id)).toBe(title);
  });
});

describe('Visibility of the lists', () => {
  test("When listing, then the authenticated list shows published posts and the caller's own drafts, never another user's drafts; the public list shows published only", async () => {
    const tok = token();
    const alicePublished = await newPost(service.app, alice, { title: `${tok} alice pub` });
    const aliceDraft = await newPost(service.app, alice, { title: `${tok} alice draft`, published: false });
    const bobPublished = await newPost(service.app, bob, { title: `${tok} bob pub` });
    const bobDraft = await newPost(service.app, bob, { title: `${tok} bob draft`, published: false });

    const forAlice = await listIds(searchPath('/posts/', tok, '&limit=100'), alice);
    expect(forAlice.sort()).toEqual([alicePublished.id, aliceDraft.id, bobPublished.id].sort());

    const forBob = await listIds(searchPath('/posts', tok, '&limit=100'), bob);
    expect(forBob.sort()).toEqual([alicePublished.id, bobPublished.id, bobDraft.id].sort());

    const publicPosts = await list(searchPath('/posts/public', tok, '&limit=100'));
    expect(publicPosts.map((p) => p.id).sort()).toEqual([alicePublished.id, bobPublished.id].sort());
    expect(publicPosts.every((p) => p.published)).toBe(true);
    for (const p of publicPosts) expectPublicPostShape(p, p.user_id === alice.user.id ? alice : bob);
    // The signed-in list keeps the owner's e-mail address.
    for (const p of await list(searchPath('/posts/', tok, '&limit=100'), bob))
      expectPostShape(p, p.user_id === alice.user.id ? alice : bob);
  });

  test('When anyone reads the public feed, with or without a token, then no e-mail address is in it', async () => {
    const tok = token();
    await newPost(service.app, alice, { title: `${tok} mail` });
    for (const call of [
      api().get(searchPath('/posts/public', tok)),
      api().get(searchPath('/posts/public', tok)).set(bearer(bob)),
    ]) {
      const res = await call;
      expect(res.status).toBe(200);
      expect(res.body).toHaveLength(1);
      expect(res.text).not.toContain(alice.user.email);
      expect(res.text).not.toContain('"email"');
    }
  });

  test('When the public list is asked with a token of any kind, then it still shows published posts only', async () => {
    const tok = token();
    const pub = await newPost(service.app, alice, { title: `${tok} pub` });
    await newPost(service.app, alice, { title: `${tok} draft`, published: false });
    expect(await listIds(searchPath('/posts/public', tok), alice)).toEqual([pub.id]);
  });

  test('When the lists are fetched, then each post carries its owner and vote total', async () => {
    const tok = token();
    const created = await newPost(service.app, bob, { title: `${tok} shaped` });
    await vote(service.app, alice, created.id, 1).expect(201);
    for (const [path, account] of [
      ['/posts/', alice],
      ['/posts', bob],
      ['/posts/public', undefined],
    ] as const) {
      const posts = await list(searchPath(path, tok), account);
      expect(posts).toHaveLength(1);
      const [post] = posts;
      if (!post) throw new Error('no post');
      if (account) expectPostShape(post, bob);
      else expectPublicPostShape(post, bob);
      expect(post.votes).toBe(1);
    }
  });

  test('When no token is sent to the authenticated list, then 401 on /posts/ and /posts', async () => {
    expect(expectProblem(await api().get('/posts/'), 401).detail).toBe('Not authenticated');
    expect(expectProblem(await api().get('/posts'), 401).detail).toBe('Not authenticated');
    expect(expectProblem(await api().get('/posts?limit=0'), 401).detail).toBe('Not authenticated');
    const bad = await api()
      .get('/posts/')
      .set(bearer(`${alice.token}x`));
    expect(expectProblem(bad, 401).detail).toBe('Could not validate credentials');
  });
});

describe('List query rules', () => {
  const badQueries = [
    'limit=0',
    'limit=101',
    'limit=-1',
    'limit=abc',
    'limit=1.5',
    'limit=',
    'skip=-1',
    'skip=abc',
    'skip=1.5',
    'limit=5&limit=6',
    'skip=1&skip=2',
    'search=a&search=b',
  ];

  // The authenticated list with and without its slash, and the public list without a token.
  const lists = ['/posts/', '/posts', '/posts/public'];
  test.each(lists.flatMap((path) => badQueries.map((query) => [path, query])))(
    'When %s gets ?%s, then 422 naming what is wrong',
    async (path, query) => {
      const req = api().get(`${path}?${query}`);
      if (path !== '/posts/public') void req.set(bearer(alice));
      expect(expectProblem(await req, 422).errors?.length).toBeGreaterThan(0);
    },
  );

  test.each(['/posts/', '/posts/public'])(
    'When %s is asked to skip past the ceiling (10,000), then 422 naming skip and pointing to the cursor; at the ceiling, 200',
    async (path) => {
      for (const skip of ['10001', '9007199254740991']) {
        const res = await api().get(`${path}?skip=${skip}`).set(bearer(alice));
        const problem = expectProblem(res, 422);
        expect(problem.errors).toEqual([
          { field: 'skip', message: expect.stringMatching(/10000.*cursor/) as string },
        ]);
      }
      expect((await api().get(`${path}?skip=10000`).set(bearer(alice))).status).toBe(200);
    },
  );

  test('When the query names a field, then the 422 errors name it too', async () => {
    const res = await api().get('/posts/?limit=0&skip=-1').set(bearer(alice));
    const fields = expectProblem(res, 422).errors?.map((e) => e.field);
    expect(fields).toEqual(expect.arrayContaining(['limit', 'skip']));
  });
});

describe('Pagination and order', () => {
  const count = 25;
  const tok = token();
  const createdIds: number[] = [];

  beforeAll(async () => {
    for (let i = 0; i < count; i += 1) {
      const post = await newPost(service.app, i % 2 === 0 ? alice : bob, { title: `${tok} page ${i}` });
      createdIds.push(post.id);
    }
  });

  test('When 25 posts are walked with limit 10 and skip 0, 10, 20, then pages have 10, 10 and 5 posts with no overlap and no gap, newest first', async () => {
    const pages: PostBody[][] = [];
    for (const skip of [0, 10, 20, 30])
      pages.push(await list(searchPath('/posts', tok, `&limit=10&skip=${skip}`), alice));
    expect(pages.map((p) => p.length)).toEqual([10, 10, 5, 0]);
    const walked = pages.flat();
    const ids = walked.map((p) => p.id);
    expect(new Set(ids).size).toBe(count);
    expect(ids).toEqual([...createdIds].reverse());
    for (let i = 1; i < walked.length; i += 1) {
      const prev = walked[i - 1];
      const cur = walked[i];
      if (!prev || !cur) throw new Error('missing post');
      const prevTime = new Date(prev.created_at).getTime();
      const curTime = new Date(cur.created_at).getTime();
      expect(prevTime).toBeGreaterThanOrEqual(curTime);
      if (prevTime === curTime) expect(prev.id).toBeGreaterThan(cur.id);
    }
  });

  test('When the public list is walked the same way, then it gives the same order', async () => {
    const ids: number[] = [];
    for (const skip of [0, 10, 20])
      ids.push(...(await listIds(searchPath('/posts/public', tok, `&limit=10&skip=${skip}`))));
    expect(ids).toEqual([...createdIds].reverse());
  });

  test('When limit is omitted, then 10 posts are returned (the newest 10)', async () => {
    const ids = await listIds(searchPath('/posts/', tok), alice);
    expect(ids).toEqual([...createdIds].reverse().slice(0, 10));
    expect(await listIds(searchPath('/posts/public', tok))).toEqual(ids);
  });

  test('When skip is omitted, then it defaults to 0', async () => {
    const ids = await listIds(searchPath('/posts/', tok, '&limit=3'), alice);
    expect(ids).toEqual([...createdIds].reverse().slice(0, 3));
  });

  test('When limit is 100 (the maximum), then all matching posts are returned', async () => {
    const ids = await listIds(searchPath('/posts/', tok, '&limit=100'), alice);
    expect(ids).toEqual([...createdIds].reverse());
    const unfiltered = await list('/posts/?limit=100', alice);
    expect(unfiltered.length).toBeGreaterThan(25);
    expect(unfiltered.length).toBeLessThanOrEqual(100);
    expect(expectProblem(await api().get('/posts/public?limit=101'), 422).errors?.[0]?.field).toBe('limit');
  });

  test('When posts share created_at, then they are ordered by id descending, across pages too', async () => {
    const t = token();
    const ids = await newPosts(service.app, alice, 4, (i) => ({ title: `${t} tie ${i}` }));
    // Force the tie the ordering rule is about (sequential inserts rarely share a timestamp).
    await service.db
      .knex('posts')
      .whereIn('id', ids)
      .update({ created_at: new Date('2030-01-01T00:00:00.000Z') });

    const posts = await list(searchPath('/posts/', t), alice);
    expect(posts.map((p) => p.created_at)).toEqual(Array<string>(4).fill('2030-01-01T00:00:00.000Z'));
    expect(posts.map((p) => p.id)).toEqual([...ids].sort((a, b) => b - a));

    const oneByOne: number[] = [];
    for (let skip = 0; skip < 4; skip += 1)
      oneByOne.push(...(await listIds(searchPath('/posts/public', t, `&limit=1&skip=${skip}`))));
    expect(oneByOne).toEqual([...ids].sort((a, b) => b - a));
  });

  test('When created_at and id disagree, then created_at decides (newest first)', async () => {
    const t = token();
    const first = await newPost(service.app, alice, { title: `${t} older id` });
    const second = await newPost(service.app, alice, { title: `${t} newer id` });
    await service.db
      .knex('posts')
      .where({ id: first.id })
      .update({ created_at: new Date('2031-01-01T00:00:00.000Z') });
    expect(await listIds(searchPath('/posts/', t), alice)).toEqual([first.id, second.id]);
    expect(await listIds(searchPath('/posts/public', t))).toEqual([first.id, second.id]);
  });
});

describe('Search', () => {
  test('When searching, then the match is a case-insensitive substring of the title, with a space sent as %20', async () => {
    const t = token();
    const hit = await newPost(service.app, alice, { title: `Hello Big ${t} World` });
    await newPost(service.app, alice, { title: `Hello ${t} World`, content: `Big ${t} World` });
    const search = `big ${t.toUpperCase()} wORLD`;
    const url = searchPath('/posts/', search);
    expect(url).toContain('%20');
    expect(await listIds(url, alice)).toEqual([hit.id]);
    expect(await listIds(searchPath('/posts/public', search))).toEqual([hit.id]);
  });

  test.each([
    ['"100%"', '"%" matches itself only (no "1000 things")', '100% sure', '1000 things', '100%', '100%25'],
    ['"a_b"', '"_" matches itself only (no "axb")', 'a_b', 'axb', 'a_b', 'a_b'],
    ['a backslash', 'it matches itself', 'c\\d', 'cd', 'c\\d', 'c%5Cd'],
  ])('When searching for %s, then %s', async (_term, _then, title, decoy, search, encoded) => {
    const t = token();
    const literal = await newPost(service.app, alice, { title: `${t} ${title}` });
    await newPost(service.app, alice, { title: `${t} ${decoy}` });
    const url = searchPath('/posts/', `${t} ${search}`);
    expect(url).toContain(encoded);
    expect(await listIds(url, alice)).toEqual([literal.id]);
    expect(await listIds(searchPath('/posts/public', `${t} ${search}`))).toEqual([literal.id]);
  });

  test('When search is combined with limit and skip, then the page is taken from the matches', async () => {
    const t = token();
    const ids = await newPosts(service.app, bob, 5, (i) => ({ title: `${t} combo ${i}` }));
    await newPost(service.app, bob, { title: `unrelated ${token()}` });
    const newestFirst = [...ids].reverse();
    expect(await listIds(searchPath('/posts/', t, '&limit=2&skip=1'), alice)).toEqual(
      newestFirst.slice(1, 3),
    );
    expect(await listIds(`/posts?limit=2&skip=3&search=${t}`, alice)).toEqual(newestFirst.slice(3, 5));
    expect(await listIds(searchPath('/posts/public', t, '&skip=4&limit=10'))).toEqual(newestFirst.slice(4));
  });

  test('When the search is shorter than three letters (one, two), then it is still a case-insensitive substring of titles, drafts only for their owner', async () => {
    // "zq" and "ǂ" appear in no other title of this file: a short term can carry no unique token.
    const t = token();
    const published = await newPost(service.app, alice, { title: `${t} ZQuiet ǂ` });
    const draft = await newPost(service.app, alice, { title: `${t} lazq`, published: false });
    await newPost(service.app, alice, { title: `${t} z q` });
    expect(await listIds(searchPath('/posts/', 'zq'), alice)).toEqual([draft.id, published.id]);
    expect(await listIds(searchPath('/posts/', 'Zq'), bob)).toEqual([published.id]);
    expect(await listIds(searchPath('/posts/public', 'zQ'))).toEqual([published.id]);
    expect(await listIds(searchPath('/posts/public', 'ǂ'))).toEqual([published.id]);
  });

  test('When the search holds only wildcard characters ("%%", "_%"), then they match themselves, however few', async () => {
    const t = token();
    const twoPercent = await newPost(service.app, bob, { title: `${t} 50%% off` });
    const underscorePercent = await newPost(service.app, bob, { title: `${t} 9_%` });
    expect(await listIds(searchPath('/posts/public', '%%'))).toEqual([twoPercent.id]);
    expect(await listIds(searchPath('/posts/', '_%'), alice)).toEqual([underscorePercent.id]);
  });

  test('When a short search is paged by skip and by cursor, then the pages are its matches, newest first, without overlap', async () => {
    const t = token();
    const ids = await newPosts(service.app, bob, 5, (i) => ({ title: `${t} qj${i}` }));
    const newestFirst = [...ids].reverse();
    expect(await listIds(searchPath('/posts/public', 'qj', '&limit=2&skip=1'))).toEqual(
      newestFirst.slice(1, 3),
    );
    const first = await api()
      .get(searchPath('/posts/', 'qj', '&limit=3'))
      .set(bearer(alice));
    expect((first.body as PostBody[]).map((p) => p.id)).toEqual(newestFirst.slice(0, 3));
    const next = /<([^>]+)>; rel="next"/.exec(String(first.headers.link))?.[1];
    expect(next).toContain('search=qj');
    expect(await listIds(String(next), alice)).toEqual(newestFirst.slice(3));
  });

  test("When searching another user's draft title, then it is not found", async () => {
    const t = token();
    await newPost(service.app, bob, { title: `${t} bob secret`, published: false });
    expect(await listIds(searchPath('/posts/', t), alice)).toEqual([]);
    expect(await listIds(searchPath('/posts/', t), bob)).toHaveLength(1);
  });
});

/** The ETag a GET of the post answers `account` with. */
const etagOf = async (account: Account, id: number): Promise<string> => {
  const res = await getPost(account, id).expect(200);
  return res.headers.etag as string;
};

describe('If-None-Match on PUT and DELETE /posts/{id}', () => {
  const update = (id: number, ifNoneMatch: string) =>
    api()
      .put(`/posts/${id}`)
      .set(bearer(alice))
      .set('If-None-Match', ifNoneMatch)
      .send({ title: 'Overwritten', content: 'x' });

  test.each([
    ['*', () => '*'],
    ['the current ETag', (tag: string) => tag],
    ['the current ETag without W/', (tag: string) => tag.slice(2)],
    ['a list holding the current ETag', (tag: string) => `W/"other", ${tag}`],
    ['a value that is no tag', () => 'garbage'],
  ])('When If-None-Match is %s, then PUT and DELETE are 412 and nothing changes', async (_name, form) => {
    const title = `Kept ${token()}`;
    const created = await newPost(service.app, alice, { title });
    const value = form(await etagOf(alice, created.id));
    expectProblem(await update(created.id, value), 412);
    expectProblem(
      await api().delete(`/posts/${created.id}`).set(bearer(alice)).set('If-None-Match', value),
      412,
    );
    expect(await titleOf(created.id)).toBe(title);
  });

  test('When If-None-Match names only an older version, then PUT and DELETE go ahead', async () => {
    const created = await newPost(service.app, alice, { title: `Older ${token()}` });
    const older = await etagOf(alice, created.id);
    await replace(created.id, { title: 'Changed', content: 'c' }).expect(200);
    expect((await update(created.id, older)).status).toBe(200);
    await api().delete(`/posts/${created.id}`).set(bearer(alice)).set('If-None-Match', older).expect(204);
  });
});

describe('If-Match on PUT and DELETE /posts/{id}', () => {
  const update = (id: number, ifMatch: string | undefined, title: string) => {
    const req = api().put(`/posts/${id}`).set(bearer(alice));
    if (ifMatch !== undefined) void req.set('If-Match', ifMatch);
    return req.send({ title, content: 'edited' });
  };

  test('When the ETag of the GET answer is sent with PUT, then the update succeeds and its answer carries the new ETag', async () => {
    const created = await newPost(service.app, alice, { title: `Tagged ${token()}` });
    const tag = await etagOf(alice, created.id);
    expect(tag).toMatch(/^W\/"/);
    const res = await update(created.id, tag, 'First edit');
    expect(res.status).toBe(200);
    expect((res.body as PostBody).title).toBe('First edit');
    expect(res.headers.etag).not.toBe(tag);
    expect(res.headers.etag).toBe(await etagOf(alice, created.id));
  });

  test.each([
    ['the tag without W/', (tag: string) => tag.slice(2)],
    ['a list holding the tag', (tag: string) => `W/"other", ${tag}`],
    ['*', () => '*'],
  ])('When If-Match is %s, then it matches the current post', async (_name, form) => {
    const created = await newPost(service.app, alice, { title: `Forms ${token()}` });
    const tag = await etagOf(alice, created.id);
    expect((await update(created.id, form(tag), 'Matched')).status).toBe(200);
  });

  test('When the post changed after the client read it, then a PUT with the old ETag is 412 problem+json and changes nothing', async () => {
    const created = await newPost(service.app, alice, { title: `Stale ${token()}` });
    const stale = await etagOf(alice, created.id);
    await update(created.id, stale, 'Someone else won').expect(200);
    const res = await update(created.id, stale, 'Lost update');
    expectProblem(res, 412);
    expect(await titleOf(created.id)).toBe('Someone else won');
  });

  test("When a vote changed the post after it was read, then its old ETag no longer matches (the tag is the GET answer's)", async () => {
    const created = await newPost(service.app, alice, { title: `Voted tag ${token()}` });
    const before = await etagOf(alice, created.id);
    await vote(service.app, bob, created.id, 1).expect(201);
    expectProblem(await update(created.id, before, 'x'), 412);
  });

  test.each([['garbage'], [''], ['"unquoted'], ['W/"x" junk']])(
    'When If-Match is %j (no tag of the post), then 412 and nothing changes',
    async (value) => {
      const title = `Odd ${token()}`;
      const created = await newPost(service.app, alice, { title });
      expectProblem(await update(created.id, value, 'x'), 412);
      expect(await titleOf(created.id)).toBe(title);
    },
  );

  test('When DELETE carries a stale ETag, then 412 and the post stays; with the current one, 204', async () => {
    const created = await newPost(service.app, alice, { title: `Delete tag ${token()}` });
    const stale = await etagOf(alice, created.id);
    await update(created.id, undefined, 'Changed meanwhile').expect(200);
    expectProblem(await api().delete(`/posts/${created.id}`).set(bearer(alice)).set('If-Match', stale), 412);
    await getPost(alice, created.id).expect(200);
    const current = await etagOf(alice, created.id);
    await api().delete(`/posts/${created.id}`).set(bearer(alice)).set('If-Match', current).expect(204);
    expectProblem(await getPost(alice, created.id), 404);
  });

  test("When If-Match names a post that is missing, another user's draft, or not the caller's, then 404, 404 and 403 as without it", async () => {
    expectProblem(await update(MISSING_ID, '*', 'x'), 404);
    const draft = await newPost(service.app, bob, { title: `Bob draft ${token()}`, published: false });
    expectProblem(await update(draft.id, '*', 'x'), 404);
    const bobs = await newPost(service.app, bob, { title: `Bob post ${token()}` });
    const tag = await etagOf(alice, bobs.id);
    expectProblem(await update(bobs.id, tag, 'x'), 403);
    expectProblem(await api().delete(`/posts/${bobs.id}`).set(bearer(alice)).set('If-Match', tag), 403);
  });

  test('When two editors send the same ETag at once, then exactly one wins and the other gets 412', async () => {
    const created = await newPost(service.app, alice, { title: `Race ${token()}` });
    const tag = await etagOf(alice, created.id);
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => update(created.id, tag, `Editor ${i}`)),
    );
    const statuses = results.map((res) => res.status).sort();
    expect(statuses).toEqual([200, 412, 412, 412, 412, 412]);
    const winner = results.find((res) => res.status === 200)?.body as PostBody;
    expect(await titleOf(created.id)).toBe(winner.title);
  });

  test('When no If-Match is sent, then the last writer wins as before', async () => {
    const created = await newPost(service.app, alice, { title: `No tag ${token()}` });
    await update(created.id, undefined, 'One').expect(200);
    await update(created.id, undefined, 'Two').expect(200);
    expect(await titleOf(created.id)).toBe('Two');
  });
});

describe('The largest answer', () => {
  // docs/security.md, "Memory per connection": what the process may hold per answer rests on it.
  const WIDEST_ALLOWED = '\u20ac';
  const LARGEST_PAGE_BYTES = 6_200_000;

  test('When 100 posts of the longest title and content in the widest characters allowed are listed, then the page stays under 6.2 MB, and wider ones are refused', async () => {
    // Six bytes each in JSON (\u0001, \ud800): refused, so they never widen a page.
    for (const wider of ['\u0001', '\u001f', '\ud800'])
      expectProblem(await create({ title: 'x', content: wider.repeat(16_000) }), 422);
    // The longest address the e-mail rule accepts (254 characters), which the signed-in list carries.
    const address = `${'w'.repeat(64)}@${'d'.repeat(60)}.${'e'.repeat(60)}.${'f'.repeat(59)}.example`;
    const wide = await newAccount(service.app, address);
    // A word of its own at the title's start, so the page holds these posts alone.
    const word = token();
    for (let i = 0; i < 100; i++)
      await newPost(service.app, wide, {
        title: `${word} `.padEnd(300, WIDEST_ALLOWED),
        content: WIDEST_ALLOWED.repeat(20_000),
      });
    const page = await api().get(`/posts/?limit=100&search=${word}`).set(bearer(alice)).expect(200);
    const bytes = Buffer.byteLength(page.text);
    expect((page.body as PostBody[]).every((post) => post.owner.email === address)).toBe(true);
    expect(bytes).toBeGreaterThan(6_100_000);
    expect(bytes).toBeLessThan(LARGEST_PAGE_BYTES);
  });
});

describe('The answers and /openapi.json', () => {
  test('When a post is created, read, replaced, listed and read on the public feed, then each answer is what /openapi.json documents it as', async () => {
    const post = await documentedAs(service.app, 'Post');
    const publicPost = await documentedAs(service.app, 'PublicPost');
    const title = `Documented ${token()}`;
    const created = await create({ title, content: 'x' }).expect(201);
    const { id } = created.body as PostBody;
    const read = await getPost(alice, id);
    const replaced = await replace(id, { title, content: 'y' }).expect(200);
    const listed = await api().get(searchPath('/posts/', title)).set(bearer(alice)).expect(200);
    const feed = await api().get(searchPath('/posts/public', title)).expect(200);
    expect(read.status).toBe(200);
    expect(listed.body).toHaveLength(1);
    expect(feed.body).toHaveLength(1);
    for (const body of [created.body, read.body, replaced.body, ...(listed.body as unknown[])])
      expect(post(body)).toEqual([]);
    const [onFeed] = feed.body as unknown[];
    expect(publicPost(onFeed)).toEqual([]);
    // The two components differ where the answers do: the feed's owner has no e-mail address.
    expect(post(onFeed)).toEqual(["/owner must have required property 'email'"]);
  });
});

describeOnPostgres('A PUT without conditions, beside a vote', () => {
  test('When a vote holds the post as the PUT arrives, then the answer counts that vote and carries the ETag GET gives', async () => {
    const created = await newPost(service.app, alice, { title: `Voted ${token()}` });
    const [voting, watching] = [await connectionBeside(service.db), await connectionBeside(service.db)];
    try {
      // A vote as the service casts one, held open: it locks the post's row until it commits.
      const trx = await voting.transaction();
      await trx.raw('SELECT 1 FROM posts WHERE id = ? FOR SHARE', [created.id]);
      await trx('votes').insert({ user_id: bob.user.id, post_id: created.id });
      const put = api()
        .put(`/posts/${created.id}`)
        .set(bearer(alice))
        .send({ title: 'Edited', content: 'c' });
      const answer = put.then((res) => res);
      await waitFor('the PUT to wait for the vote', 10_000, async () => {
        const rows = await rowsOf<{ waiting: number }>(
          watching,
          "SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        );
        return (rows[0]?.waiting ?? 0) > 0;
      });
      await trx.commit();
      const res = await answer;
      expect(res.status).toBe(200);
      expect((res.body as PostBody).votes).toBe(1);
      expect(res.headers.etag).toBe(await etagOf(alice, created.id));
    } finally {
      await Promise.all([voting.destroy(), watching.destroy()]);
    }
  });
});
