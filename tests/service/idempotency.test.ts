/**
 * `Idempotency-Key` on `POST /posts/`: a retry of a request whose answer the client never got, or
 * whose answer said the change may or may not stand, finds the post the first try made instead of
 * making a second one.
 */
import request from 'supertest';
import { createApp } from '../../service/src/app';
import { indexState } from '../../service/src/db/concurrent-index';
import { migrateToLatest } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import {
  bearer,
  databaseSnapshot,
  expectProblem,
  migrateFirst,
  newAccount,
  onFresh,
  postsFixture,
  uniqueToken,
  type Account,
} from './helpers';
import { countOf } from '../../tools/harness/postgres';

const { service, alice, bob } = postsFixture(['alice', 'bob']);

const create = (account: Account, key: string | undefined, body: object = { title: 't', content: 'c' }) => {
  const req = request(service.app).post('/posts/').set(bearer(account));
  return (key === undefined ? req : req.set('Idempotency-Key', key)).send(body);
};
const postsWithKey = (key: string) => countOf(service.db.knex, 'posts WHERE idempotency_key = ?', [key]);

test('When a post is created twice with the same Idempotency-Key, then both answers are 201 with the same post, and one post is stored', async () => {
  const key = uniqueToken('k');
  const first = await create(alice, key);
  const again = await create(alice, key);

  expect(first.status).toBe(201);
  expect(again.status).toBe(201);
  expect(again.body).toEqual(first.body);
  expect(await postsWithKey(key)).toBe(1);
});

// The embedded database's log carries a refused key in its DETAIL line; the key must not pass for a PANIC there.
test('When the key reads like a database log line, then its retry answers the one post and the service goes on', async () => {
  const key = uniqueToken('k PANIC: x WARNING: y');
  const first = await create(alice, key);
  const again = await create(alice, key);

  expect(again.status).toBe(201);
  expect(again.body).toEqual(first.body);
  await request(service.app)
    .get(`/posts/${String((first.body as { id: number }).id)}`)
    .set(bearer(alice))
    .expect(200);
  expect(process.exitCode ?? 0).toBe(0);
});

test('When the key is sent as an sf-string ("…") and then bare, then it is the same key', async () => {
  const key = uniqueToken('k');
  const quoted = await create(alice, `"${key}"`);
  const bare = await create(alice, key);

  expect(bare.body).toEqual(quoted.body);
  expect(await postsWithKey(key)).toBe(1);
});

test('When the retry answers after the post was edited, then it carries the post as it is now', async () => {
  const key = uniqueToken('k');
  const first = await create(alice, key);
  const id = (first.body as { id: number }).id;
  await request(service.app)
    .put(`/posts/${id}`)
    .set(bearer(alice))
    .send({ title: 'edited', content: 'c' })
    .expect(200);

  const again = await create(alice, key);

  expect(again.status).toBe(201);
  expect(again.body).toMatchObject({ id, title: 'edited' });
});

test('When the same key comes with another title, content or published, then the answer is 422 naming Idempotency-Key, and nothing changes', async () => {
  const key = uniqueToken('k');
  await create(alice, key, { title: 't', content: 'c', published: true });
  const before = await databaseSnapshot(service.db);

  for (const body of [
    { title: 'other', content: 'c' },
    { title: 't', content: 'other' },
    { title: 't', content: 'c', published: false },
  ]) {
    const problem = expectProblem(await create(alice, key, body), 422);
    expect(problem.errors?.map((e) => e.field)).toEqual(['Idempotency-Key']);
  }
  expect(await databaseSnapshot(service.db)).toBe(before);
});

test('When another user sends the same key, then it is their own key: a post of their own', async () => {
  const key = uniqueToken('k');
  const mine = await create(alice, key);
  const theirs = await create(bob, key);

  expect(theirs.status).toBe(201);
  expect((theirs.body as { id: number }).id).not.toBe((mine.body as { id: number }).id);
  expect(await postsWithKey(key)).toBe(2);
});

test('When eight requests with the same key arrive at once, then all are 201 with one post, the only one stored', async () => {
  const key = uniqueToken('k');
  const answers = await Promise.all(Array.from({ length: 8 }, () => create(alice, key)));

  expect(answers.map((a) => a.status)).toEqual(Array.from({ length: 8 }, () => 201));
  expect(new Set(answers.map((a) => (a.body as { id: number }).id)).size).toBe(1);
  expect(await postsWithKey(key)).toBe(1);
});

test('When the post a key made is deleted, then the key makes a new post', async () => {
  const key = uniqueToken('k');
  const first = (await create(alice, key)).body as { id: number };
  await request(service.app).delete(`/posts/${first.id}`).set(bearer(alice)).expect(204);

  const again = await create(alice, key);

  expect(again.status).toBe(201);
  expect((again.body as { id: number }).id).not.toBe(first.id);
});

test('When the key is empty, too long, two keys, or holds a quote, backslash or control character, then the answer is 422 naming Idempotency-Key, and nothing changes', async () => {
  const before = await databaseSnapshot(service.db);
  for (const key of ['', '""', 'k'.repeat(256), 'a, b', 'a"b', 'a\\b', 'a\tb', 'é']) {
    const problem = expectProblem(await create(alice, key), 422);
    expect(problem.errors?.map((e) => e.field)).toEqual(['Idempotency-Key']);
  }
  expect(await databaseSnapshot(service.db)).toBe(before);
});

test('When no key is sent, then each request makes a post of its own', async () => {
  const title = uniqueToken('untitled');
  await create(alice, undefined, { title, content: 'c' }).expect(201);
  await create(alice, undefined, { title, content: 'c' }).expect(201);
  expect(await countOf(service.db.knex, 'posts WHERE title = ?', [title])).toBe(2);
});

test('When the unique index was undone while one key went on several posts, then migrating again keeps every post, the oldest keeps the key and a retry answers with it', async () => {
  await onFresh({}, async (db, _another, settings) => {
    // The schema of migrate down --to 20261129000010: the key's columns without the index.
    await migrateFirst(db, 10);
    const app = createApp({ db, settings, logger: createLogger('silent') });
    const carol = await newAccount(app);
    const send = (key?: string) => {
      const req = request(app).post('/posts/').set(bearer(carol));
      return (key === undefined ? req : req.set('Idempotency-Key', key)).send({ title: 't', content: 'c' });
    };
    const key = uniqueToken('k');
    const first = (await send(key).expect(201)).body as { id: number };
    const others = [await send().expect(201), await send().expect(201)].map(
      (r) => (r.body as { id: number }).id,
    );
    // What retries racing without the index leave: the first post's key and digest on the others too.
    const keyed = await db
      .knex('posts')
      .where({ id: first.id })
      .first<{ idempotency_key: string; idempotency_digest: string }>(
        'idempotency_key',
        'idempotency_digest',
      );
    await db.knex('posts').whereIn('id', others).update(keyed);

    await migrateToLatest(db, createLogger('silent'));

    expect(await indexState(db.knex, 'posts_user_id_idempotency_key_unique')).toBe('valid');
    expect(await countOf(db.knex, 'posts WHERE user_id = ?', [carol.user.id])).toBe(3);
    expect(await db.knex('posts').where({ idempotency_key: key }).pluck('id')).toEqual([first.id]);
    expect(((await send(key).expect(201)).body as { id: number }).id).toBe(first.id);
  });
}, 120_000);
