import type { Knex } from 'knex';
import request from 'supertest';
import {
  bearer,
  expectProblem,
  newPost,
  newPosts,
  uniqueToken,
  type Account,
  type PostBody,
  postsFixture,
} from './helpers';

/**
 * Keyset paging of both lists: `Link: <…>; rel="next"` on every page that has more after it, and
 * `cursor` pages that neither skip nor repeat a post, at microsecond precision, as posts are added.
 */

const { service, alice, bob } = postsFixture(['alice', 'bob']);

const api = () => request(service.app);

const token = (): string => uniqueToken('p');

const get = (path: string, account?: Account) =>
  account ? api().get(path).set(bearer(account)) : api().get(path);

const idsOf = (res: request.Response): number[] => (res.body as PostBody[]).map((p) => p.id);

/** The target of `Link: <target>; rel="next"`, or undefined when there is no such header. */
function nextLink(res: request.Response): string | undefined {
  const header = res.headers.link;
  if (header === undefined) return undefined;
  const match = /^<([^<>]+)>; rel="next"$/.exec(header);
  if (!match?.[1]) throw new Error(`not a next link: ${header}`);
  return match[1];
}

/** The cursor in `res`'s next link. */
const cursorOf = (res: request.Response) => new URLSearchParams(nextLink(res)?.split('?')[1]).get('cursor');

/**
 * Follows `Link: rel="next"` from `path` until a page has none. `between` runs after each page, before
 * the next is asked for. Returns every page's ids and the links followed.
 */
async function walk(
  path: string,
  account?: Account,
  between: () => Promise<void> = () => Promise.resolve(),
): Promise<{ pages: number[][]; links: string[] }> {
  const pages: number[][] = [];
  const links: string[] = [];
  let next: string | undefined = path;
  while (next !== undefined) {
    const res = await get(next, account).expect(200);
    pages.push(idsOf(res));
    next = nextLink(res);
    if (next !== undefined) {
      links.push(next);
      await between();
    }
    if (pages.length > 1000) throw new Error('the walk does not end');
  }
  return { pages, links };
}

/**
 * The ids of the posts `where` picks, newest first by (created_at, id) as the database orders them:
 * to the microsecond, where a JavaScript Date stops at the millisecond.
 */
const newestFirst = (where: (posts: Knex.QueryBuilder) => Knex.QueryBuilder): Promise<number[]> =>
  where(service.db.knex('posts')).orderBy('created_at', 'desc').orderBy('id', 'desc').pluck('id');

/** Sets created_at of a post to an exact timestamp (microseconds and all). */
async function setCreatedAt(id: number, timestamp: string): Promise<void> {
  await service.db.knex.raw('UPDATE posts SET created_at = ?::timestamptz WHERE id = ?', [timestamp, id]);
}

/**
 * Keeps adding posts whose titles match `title` (drafts by alice, then published, and posts
 * published at once by bob) until stopped; `progress()` resolves once one more has been added.
 */
function startInserting(title: string) {
  const added: number[] = [];
  const state = { stopped: false };
  let waiter: (() => void) | undefined;
  const loop = (async () => {
    for (let i = 0; !state.stopped; i += 1) {
      const draft = await newPost(service.app, alice, { title: `${title} new draft ${i}`, published: false });
      added.push(draft.id);
      await api()
        .put(`/posts/${draft.id}`)
        .set(bearer(alice))
        .send({ title: `${title} new published ${i}`, content: 'now public' })
        .expect(200);
      added.push((await newPost(service.app, bob, { title: `${title} new ${i}` })).id);
      waiter?.();
    }
  })();
  return {
    added,
    progress: () =>
      new Promise<void>((resolve) => {
        waiter = resolve;
      }),
    stop: async () => {
      state.stopped = true;
      waiter?.();
      await loop;
    },
  };
}

describe('Walking a list by its Link header while posts are added', () => {
  const t = token();

  beforeAll(async () => {
    for (let i = 0; i < 23; i += 1) {
      const author = i % 3 === 0 ? bob : alice;
      await newPost(service.app, author, { title: `${t} post ${i}`, published: i % 5 !== 4 });
    }
  });

  test.each([
    { list: 'public', path: '/posts/public', limit: 4 },
    { list: 'authenticated', path: '/posts/', limit: 3 },
    { list: 'authenticated (no slash)', path: '/posts', limit: 5 },
  ])(
    'When the $list list is walked with limit $limit and a search, then every post there at the start comes once, newest first, and none added meanwhile',
    async ({ path, limit }) => {
      const account = path === '/posts/public' ? undefined : alice;
      const start = await get(`${path}?search=${t}&limit=100`, account);
      const before = idsOf(start);
      // The authenticated list holds alice's drafts and no draft of bob's; the public list no draft.
      const drafts = (start.body as PostBody[]).filter((p) => !p.published);
      if (account) {
        expect(drafts.length).toBeGreaterThan(0);
        expect(drafts.every((p) => p.user_id === alice.user.id)).toBe(true);
      } else expect(drafts).toEqual([]);

      // The inserting starts once the first page is read, and a post is added before every next one.
      let inserter: ReturnType<typeof startInserting> | undefined;
      const walked = await walk(`${path}?limit=${limit}&search=${t}`, account, () => {
        inserter ??= startInserting(t);
        return inserter.progress();
      }).finally(() => inserter?.stop());
      if (!inserter) throw new Error('the walk had one page only');
      const { added } = inserter;
      expect(walked.pages.length).toBe(Math.ceil(before.length / limit));
      expect(walked.pages.slice(0, -1).every((page) => page.length === limit)).toBe(true);
      expect(walked.pages.flat()).toEqual(before);
      expect(added.length).toBeGreaterThanOrEqual(2 * (walked.pages.length - 1));
      expect(walked.pages.flat().filter((id) => added.includes(id))).toEqual([]);
      expect(walked.pages.flat()).toEqual(await newestFirst((posts) => posts.whereIn('id', before)));
      for (const link of walked.links) {
        expect(link).toMatch(new RegExp(`^${path}\\?limit=${limit}&search=${t}&cursor=[A-Za-z0-9_-]+$`));
      }
      // A fresh walk from the top shows the posts added during the first one.
      const again = await walk(`${path}?limit=${limit}&search=${t}`, account);
      expect(again.pages.flat()).toEqual(expect.arrayContaining(added));
    },
  );

  test('When the whole public feed is walked with the default limit, then it holds every published post once, in order', async () => {
    const expected = await newestFirst((posts) => posts.where('published', true));
    const walked = await walk('/posts/public');
    expect(walked.pages.flat()).toEqual(expected);
    expect(walked.pages.length).toBe(Math.ceil(expected.length / 10));
    for (const link of walked.links) expect(link).toMatch(/^\/posts\/public\?cursor=[A-Za-z0-9_-]+$/);
  });
});

describe('Cursor precision', () => {
  test('When posts share a millisecond or their whole created_at, then cursor pages of any size neither skip nor repeat one', async () => {
    const t = token();
    const ids = await newPosts(service.app, alice, 7, (i) => ({ title: `${t} ${i}` }));
    const [p0, p1, p2, p3, p4, p5, p6] = ids as [number, number, number, number, number, number, number];
    // All in one millisecond but p6; p2-p4 identical, and p0 and p5 identical (ties go by id).
    await setCreatedAt(p0, '2035-01-01T00:00:00.000100Z');
    await setCreatedAt(p1, '2035-01-01T00:00:00.000900Z');
    for (const id of [p2, p3, p4]) await setCreatedAt(id, '2035-01-01T00:00:00.000500Z');
    await setCreatedAt(p5, '2035-01-01T00:00:00.000100Z');
    await setCreatedAt(p6, '2035-01-01T00:00:00.001000Z');
    const order = [p6, p1, p4, p3, p2, p5, p0];

    for (const limit of [1, 2, 3, 6]) {
      for (const [path, account] of [
        ['/posts/public', undefined],
        ['/posts/', alice],
      ] as const) {
        const walked = await walk(`${path}?search=${t}&limit=${limit}`, account);
        expect(walked.pages.flat()).toEqual(order);
        expect(walked.pages.length).toBe(Math.ceil(order.length / limit));
      }
    }
  });
});

describe('Cursor pages and changes between them', () => {
  test('When the post a cursor points after is deleted before the next page, then the walk continues after it', async () => {
    const t = token();
    const ids = await newPosts(service.app, alice, 7, (i) => ({ title: `${t} ${i}` }));
    const newest = [...ids].reverse();

    const first = await get(`/posts/public?search=${t}&limit=3`);
    expect(idsOf(first)).toEqual(newest.slice(0, 3));
    const anchor = newest[2] ?? 0;
    await api().delete(`/posts/${anchor}`).set(bearer(alice)).expect(204);

    const rest = await walk(nextLink(first) ?? '', alice);
    expect(rest.pages).toEqual([newest.slice(3, 6), newest.slice(6)]);
  });

  test('When a cursor from the authenticated list is used on the public list, then it pages the public list from there', async () => {
    const t = token();
    const ids = await newPosts(service.app, alice, 5, (i) => ({ title: `${t} ${i}`, published: i !== 1 }));
    const first = await get(`/posts/?search=${t}&limit=2`, alice);
    expect(idsOf(first)).toEqual([ids[4], ids[3]]);
    const cursor = cursorOf(first);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
    // The public list has no draft (ids[1]); the authenticated one has it.
    expect(idsOf(await get(`/posts/public?search=${t}&cursor=${cursor}`))).toEqual([ids[2], ids[0]]);
    expect(idsOf(await get(`/posts?search=${t}&cursor=${cursor}`, alice))).toEqual([ids[2], ids[1], ids[0]]);
    // Bob's view of alice's list has no draft of hers either.
    expect(idsOf(await get(`/posts/?search=${t}&cursor=${cursor}`, bob))).toEqual([ids[2], ids[0]]);
  });
});

describe('The Link header', () => {
  const t = token();
  let newest: number[];

  beforeAll(async () => {
    newest = (await newPosts(service.app, bob, 5, (i) => ({ title: `${t} ${i}` }))).reverse();
  });

  test('When a page holds the last posts, then it has no Link, also when it is exactly full', async () => {
    expect((await get(`/posts/public?search=${t}&limit=5`)).headers.link).toBeUndefined();
    expect((await get(`/posts/public?search=${t}&limit=100`)).headers.link).toBeUndefined();
    expect((await get(`/posts/?search=${t}&limit=5`, alice)).headers.link).toBeUndefined();
    const four = await get(`/posts/public?search=${t}&limit=4`);
    expect(nextLink(four)).toBeDefined();
    const last = await get(nextLink(four) ?? '');
    expect(idsOf(last)).toEqual(newest.slice(4));
    expect(last.headers.link).toBeUndefined();
  });

  test('When the list is empty, then 200 [] without Link', async () => {
    for (const [path, account] of [
      [`/posts/public?search=${token()}`, undefined],
      [`/posts/?search=${token()}`, alice],
      [`/posts/public?search=${t}&skip=5`, undefined],
    ] as const) {
      const res = await get(path, account).expect(200);
      expect(res.body).toEqual([]);
      expect(res.headers.link).toBeUndefined();
    }
  });

  test('When a page is asked with skip, then its Link continues by cursor right after it', async () => {
    for (const [path, account] of [
      ['/posts/public', undefined],
      ['/posts/', alice],
      ['/posts', alice],
    ] as const) {
      const page = await get(`${path}?limit=2&skip=1&search=${t}`, account);
      expect(idsOf(page)).toEqual(newest.slice(1, 3));
      const link = nextLink(page) ?? '';
      expect(link).toMatch(new RegExp(`^${path}\\?limit=2&search=${t}&cursor=[A-Za-z0-9_-]+$`));
      expect(link).not.toMatch(/skip/);
      const rest = await walk(link, account);
      expect(rest.pages).toEqual([newest.slice(3, 5)]);
    }
  });

  test('When limit is not sent, then the Link does not add one; a search is percent-encoded', async () => {
    const search = `${t} 100%&x=y`;
    const ids = [
      (await newPost(service.app, bob, { title: `a ${search} 1` })).id,
      (await newPost(service.app, bob, { title: `b ${search} 2` })).id,
    ];
    const noLimit = await get(`/posts/public?search=${t}`);
    expect(nextLink(noLimit)).toBeUndefined();
    const res = await get(`/posts/public?search=${encodeURIComponent(search)}&limit=1`);
    const link = nextLink(res) ?? '';
    expect(link).toBe(`/posts/public?limit=1&search=${t}%20100%25%26x%3Dy&cursor=${cursorOf(res)}`);
    const walked = await walk(link);
    expect([...idsOf(res), ...walked.pages.flat()]).toEqual([...ids].reverse());
    // With more posts than the default limit and no limit sent, the link carries none either.
    const many = await get('/posts/public');
    expect(nextLink(many)).toMatch(/^\/posts\/public\?cursor=[A-Za-z0-9_-]+$/);
  });
});

describe('Invalid cursors', () => {
  let cursor: string;

  beforeAll(async () => {
    const t = token();
    for (let i = 0; i < 3; i += 1) await newPost(service.app, alice, { title: `${t} ${i}` });
    const res = await get(`/posts/public?search=${t}&limit=1`);
    cursor = cursorOf(res) ?? '';
    expect(cursor).toMatch(/^[A-Za-z0-9_-]{10,64}$/);
  });

  const lists = [
    ['/posts/public', undefined],
    ['/posts/', 'alice'],
    ['/posts', 'alice'],
  ] as const;

  /** Another character in place of the one at `at`. */
  const tampered = (at: number): string =>
    `${cursor.slice(0, at)}${cursor[at] === 'A' ? 'B' : 'A'}${cursor.slice(at + 1)}`;

  test.each(lists)(
    'When %s gets a cursor the service did not write, then 422 naming cursor',
    async (path, who) => {
      const account = who ? alice : undefined;
      const bad = [
        'abc',
        '!!!!',
        '%00',
        ' ',
        '',
        cursor.slice(0, -1),
        cursor.slice(1),
        `${cursor}A`,
        `${cursor}${'A'.repeat(64)}`,
        'A'.repeat(10_000),
        tampered(0),
        tampered(5),
        tampered(cursor.length - 1),
        Buffer.from(JSON.stringify({ created_at: '2030-01-01', id: 1 })).toString('base64url'),
      ];
      for (const value of bad) {
        const res = await get(`${path}?cursor=${encodeURIComponent(value)}`, account);
        const problem = expectProblem(res, 422);
        expect(problem.errors?.map((e) => e.field)).toEqual(['cursor']);
      }
      // Two cursors are not one.
      const twice = await get(`${path}?cursor=${cursor}&cursor=${cursor}`, account);
      expect(expectProblem(twice, 422).errors?.map((e) => e.field)).toEqual(['cursor']);
      // And the genuine cursor still works.
      expect((await get(`${path}?cursor=${cursor}`, account)).status).toBe(200);
    },
  );

  test.each(lists)('When %s gets a cursor with skip (even 0), then 422 naming skip', async (path, who) => {
    const account = who ? alice : undefined;
    for (const query of [
      `skip=0&cursor=${cursor}`,
      `cursor=${cursor}&skip=3`,
      `cursor=${cursor}&skip=0&limit=5`,
    ]) {
      const problem = expectProblem(await get(`${path}?${query}`, account), 422);
      expect(problem.errors).toEqual([{ field: 'skip', message: expect.stringMatching(/cursor/) as string }]);
      expect(problem.detail).toMatch(/skip cannot be combined with cursor/);
    }
  });

  test('When the cursor is fine but limit is not, then 422 names only limit', async () => {
    const problem = expectProblem(await get(`/posts/public?cursor=${cursor}&limit=0`), 422);
    expect(problem.errors?.map((e) => e.field)).toEqual(['limit']);
  });
});
