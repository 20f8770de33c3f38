import request from 'supertest';
import {
  bearer,
  expectProblem,
  newPost,
  uniqueToken,
  type Account,
  type PostBody,
  postsFixture,
  testOnPostgres,
  vote,
} from './helpers';
import { MAX_ID } from '../../service/src/db/limits';
import { pollUntil, waitFor } from '../../tools/harness/poll';
import { countOf } from '../../tools/harness/postgres';

const ADDED = { message: 'successfully added vote' };
const DELETED = { message: 'successfully deleted vote' };
/** The largest id a column holds: no test gets that far, so no post has it. */
const MISSING_ID = MAX_ID;

const token = (): string => uniqueToken('v');

const { service, alice, bob, carol } = postsFixture(['alice', 'bob', 'carol']);

const api = () => request(service.app);

/** The total as a client sees it: GET by id, the authenticated list and the public list all agree. */
async function totalOf(post: { id: number; title: string }, viewer: Account = carol): Promise<number> {
  const one = await api().get(`/posts/${post.id}`).set(bearer(viewer)).expect(200);
  const fromGet = (one.body as PostBody).votes;

  const search = `?search=${encodeURIComponent(post.title)}`;
  const list = await api().get(`/posts/${search}`).set(bearer(viewer)).expect(200);
  const listed = (list.body as PostBody[]).find((p) => p.id === post.id);
  expect(listed?.votes).toBe(fromGet);

  if ((one.body as PostBody).published) {
    const pub = await api().get(`/posts/public${search}`).expect(200);
    expect((pub.body as PostBody[]).find((p) => p.id === post.id)?.votes).toBe(fromGet);
  }
  return fromGet;
}

const freshPost = (owner: Account = alice, published = true) =>
  newPost(service.app, owner, { title: `Votable ${token()}`, published });

describe('Vote state machine', () => {
  test('When there is no vote and dir 1 arrives, then 201 "successfully added vote" and the total goes 0 → 1', async () => {
    const post = await freshPost();
    expect(await totalOf(post)).toBe(0);
    const res = await vote(service.app, bob, post.id, 1).expect(201);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body).toEqual(ADDED);
    expect(await totalOf(post)).toBe(1);
  });

  test('When a vote exists and dir 0 arrives, then 201 "successfully deleted vote" and the total goes 1 → 0', async () => {
    const post = await freshPost();
    await vote(service.app, bob, post.id, 1).expect(201);
    expect(await totalOf(post)).toBe(1);
    expect((await vote(service.app, bob, post.id, 0).expect(201)).body).toEqual(DELETED);
    expect(await totalOf(post)).toBe(0);
  });

  test('When there is no vote and dir 0 arrives, then 404 and the total stays 0', async () => {
    const post = await freshPost();
    const res = await vote(service.app, bob, post.id, 0);
    expectProblem(res, 404);
    expect(await totalOf(post)).toBe(0);
  });

  test("When another user's vote exists and the caller withdraws, then 404 and the other vote stays", async () => {
    const post = await freshPost();
    await vote(service.app, bob, post.id, 1).expect(201);
    expectProblem(await vote(service.app, carol, post.id, 0), 404);
    expect(await totalOf(post)).toBe(1);
  });

  test('When a vote is added, withdrawn and added again, then every step follows the state machine', async () => {
    const post = await freshPost();
    expect((await vote(service.app, bob, post.id, 1)).body).toEqual(ADDED);
    expect(await totalOf(post)).toBe(1);
    expect((await vote(service.app, bob, post.id, 0)).body).toEqual(DELETED);
    expect(await totalOf(post)).toBe(0);
    expectProblem(await vote(service.app, bob, post.id, 0), 404);
    expect(await totalOf(post)).toBe(0);
    expect((await vote(service.app, bob, post.id, 1).expect(201)).body).toEqual(ADDED);
    expect(await totalOf(post)).toBe(1);
    expectProblem(await vote(service.app, bob, post.id, 1), 409);
    expect(await totalOf(post)).toBe(1);
  });

  test('When two users vote on one post, then the total is 2, and one withdrawal leaves 1', async () => {
    const post = await freshPost();
    expect((await vote(service.app, bob, post.id, 1)).status).toBe(201);
    expect((await vote(service.app, carol, post.id, 1)).status).toBe(201);
    expect(await totalOf(post, alice)).toBe(2);
    expect((await vote(service.app, bob, post.id, 0)).status).toBe(201);
    expect(await totalOf(post, alice)).toBe(1);
  });

  test('When a user votes on one post, then other posts keep their totals', async () => {
    const voted = await freshPost();
    const other = await freshPost();
    await vote(service.app, bob, voted.id, 1).expect(201);
    expect(await totalOf(voted)).toBe(1);
    expect(await totalOf(other)).toBe(0);
  });

  test('When the owner votes on their own draft, then 201 (the post is visible to them)', async () => {
    const draft = await freshPost(alice, false);
    await vote(service.app, alice, draft.id, 1).expect(201);
    expect(await totalOf(draft, alice)).toBe(1);
  });
});

describe('Missing and invisible posts', () => {
  test.each([[1], [0]])(
    'When dir %i targets a post that does not exist, then 404 naming the post (checked first)',
    async (dir) => {
      const res = await vote(service.app, bob, MISSING_ID, dir);
      expect(expectProblem(res, 404).detail).toBe(`post with id: ${MISSING_ID} was not found`);
    },
  );

  test('When a post that has votes is deleted, then the deletion answers 204, the post is gone and votes elsewhere keep their totals', async () => {
    const doomed = await freshPost();
    const kept = await freshPost();
    for (const voter of [bob, carol]) expect((await vote(service.app, voter, doomed.id, 1)).status).toBe(201);
    expect((await vote(service.app, bob, kept.id, 1)).status).toBe(201);
    expect((await api().delete(`/posts/${doomed.id}`).set(bearer(alice))).status).toBe(204);
    expect((await api().get(`/posts/${doomed.id}`).set(bearer(alice))).status).toBe(404);
    expect(await totalOf(kept)).toBe(1);
  });

  test.each([[1], [0]])(
    "When dir %i targets another user's draft, then 404 as if it did not exist, and no vote is recorded",
    async (dir) => {
      const draft = await freshPost(alice, false);
      const res = await vote(service.app, bob, draft.id, dir);
      expect(expectProblem(res, 404).detail).toBe(`post with id: ${draft.id} was not found`);
      expect(await totalOf(draft, alice)).toBe(0);
    },
  );
});

describe('Validation', () => {
  let post: { id: number; title: string };

  beforeAll(async () => {
    post = await freshPost();
  });

  test.each<[string, () => Record<string, unknown> | string, string]>([
    ['dir is 2', () => ({ post_id: post.id, dir: 2 }), 'dir'],
    ['dir is -1', () => ({ post_id: post.id, dir: -1 }), 'dir'],
    ['dir is the string "1"', () => ({ post_id: post.id, dir: '1' }), 'dir'],
    ['dir is true', () => ({ post_id: post.id, dir: true }), 'dir'],
    ['dir is 0.5', () => ({ post_id: post.id, dir: 0.5 }), 'dir'],
    ['dir is missing', () => ({ post_id: post.id }), 'dir'],
    ['post_id is missing', () => ({ dir: 1 }), 'post_id'],
    ['post_id is "abc"', () => ({ post_id: 'abc', dir: 1 }), 'post_id'],
    ['post_id is the string of an id', () => ({ post_id: String(post.id), dir: 1 }), 'post_id'],
    ['post_id is 1.5', () => ({ post_id: 1.5, dir: 1 }), 'post_id'],
    ['post_id is 1e400', () => '{"post_id": 1e400, "dir": 1}', 'post_id'],
  ])('When %s, then 422 names the field and the total is unchanged', async (_label, body, field) => {
    const res = await api()
      .post('/votes/')
      .set(bearer(bob))
      .set('Content-Type', 'application/json')
      .send(body());
    const problem = expectProblem(res, 422);
    expect(problem.errors?.map((e) => e.field)).toContain(field);
    expect(await totalOf(post)).toBe(0);
  });

  test.each([
    [0, '0'],
    [-5, '-5'],
    [2_147_483_648, '2147483648'],
    [1e21, '1000000000000000000000'],
  ])(
    'When post_id is %p, an integer no post can have, then 404 naming it in digits for dir 1 and 0, as for any missing post',
    async (postId, digits) => {
      for (const dir of [1, 0]) {
        const res = await api().post('/votes/').set(bearer(bob)).send({ post_id: postId, dir });
        expect(expectProblem(res, 404).detail).toBe(`post with id: ${digits} was not found`);
      }
      expect(await totalOf(post)).toBe(0);
    },
  );
});

describe('Concurrency', () => {
  testOnPostgres(
    "When the owner hides a post while a vote on it waits for the post's row, then the vote answers 404 and is not stored",
    async () => {
      const post = await freshPost();
      const knex = service.db.knex;
      const change = await knex.transaction();
      let voting: Promise<request.Response> | undefined;
      try {
        // What the owner's PUT does: the post's row locked, then changed, then committed.
        await change('posts').where({ id: post.id }).forUpdate().select('id');
        voting = vote(service.app, bob, post.id, 1).then((res) => res);
        const waiting = () =>
          countOf(knex, "pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
        await pollUntil(waiting, (n) => n > 0, { withinMs: 10_000 });
        await change('posts').where({ id: post.id }).update({ published: false });
        await change.commit();
      } finally {
        if (!change.isCompleted()) await change.rollback();
      }
      const res = await voting;
      expect(expectProblem(res, 404).detail).toBe(`post with id: ${post.id} was not found`);
      expect(await countOf(knex, 'votes WHERE post_id = ?', [post.id])).toBe(0);
      expect(await totalOf(post, alice)).toBe(0);
    },
  );

  testOnPostgres(
    'When the owner hides a post while a vote on it waits for its row, and shows it again before the vote is answered, then the vote answers 404, not 409, and is not stored',
    async () => {
      const post = await freshPost();
      const knex = service.db.knex;
      const waitingOn = (query: string) =>
        waitFor(`a statement like ${query} waiting for a lock`, 10_000, async () => {
          const where = "pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
          return (await countOf(knex, `${where} AND query LIKE ?`, [query])) > 0;
        });
      const hide = await knex.transaction();
      const show = await knex.transaction();
      let voting: Promise<request.Response> | undefined;
      try {
        await hide('posts').where({ id: post.id }).update({ published: false });
        voting = vote(service.app, bob, post.id, 1).then((res) => res);
        await waitingOn('%INSERT INTO "votes"%');
        // Queued behind the insert: the vote's next read of posts waits until the post shows again.
        const locked = show.raw('LOCK TABLE posts IN ACCESS EXCLUSIVE MODE').then(() => undefined);
        await waitingOn('LOCK TABLE posts%');
        await hide.commit();
        await locked;
        await show('posts').where({ id: post.id }).update({ published: true });
        await show.commit();
      } finally {
        for (const trx of [hide, show]) if (!trx.isCompleted()) await trx.rollback();
      }
      const res = await voting;
      expect(expectProblem(res, 404).detail).toBe(`post with id: ${post.id} was not found`);
      expect(await countOf(knex, 'votes WHERE post_id = ?', [post.id])).toBe(0);
      expect(await totalOf(post, alice)).toBe(0);
    },
  );

  test('When 50 identical votes arrive at once, then exactly one is 201, the rest 409, none ≥ 500, and the total is 1; when 50 withdrawals follow at once, exactly one is 201, the rest 404, and the total is 0', async () => {
    const post = await freshPost();
    const n = 50;

    const adds = await Promise.all(Array.from({ length: n }, () => vote(service.app, bob, post.id, 1)));
    const addStatuses = adds.map((r) => r.status);
    expect(addStatuses.filter((s) => s >= 500)).toEqual([]);
    expect(addStatuses.filter((s) => s === 201)).toHaveLength(1);
    expect(addStatuses.filter((s) => s === 409)).toHaveLength(n - 1);
    expect(adds.find((r) => r.status === 201)?.body).toEqual(ADDED);
    expect(await totalOf(post)).toBe(1);

    const removes = await Promise.all(Array.from({ length: n }, () => vote(service.app, bob, post.id, 0)));
    const removeStatuses = removes.map((r) => r.status);
    expect(removeStatuses.filter((s) => s >= 500)).toEqual([]);
    expect(removeStatuses.filter((s) => s === 201)).toHaveLength(1);
    expect(removeStatuses.filter((s) => s === 404)).toHaveLength(n - 1);
    expect(removes.find((r) => r.status === 201)?.body).toEqual(DELETED);
    expect(await totalOf(post)).toBe(0);
  });

  test('When several users vote on one post at once, then every vote counts', async () => {
    const post = await freshPost();
    const voters = [alice, bob, carol];
    const results = await Promise.all(voters.map((v) => vote(service.app, v, post.id, 1)));
    expect(results.map((r) => r.status)).toEqual([201, 201, 201]);
    expect(await totalOf(post)).toBe(3);
  });
});
