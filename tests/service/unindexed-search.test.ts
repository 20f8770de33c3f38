/**
 * Searches the title index cannot serve (no three letters or digits in a row) run behind a small
 * per-process limit; one more is refused at once with 503 and Retry-After, never queued.
 */
import type { Knex } from 'knex';
import request from 'supertest';
import { bearer, expectProblem, newPost, postsFixture, testOnPostgres, usingPostgres } from './helpers';
import { sleep } from '../../tools/harness/client';
import { pollUntil } from '../../tools/harness/poll';

const { service, dana } = postsFixture(['dana'], { SEARCH_UNINDEXED_CONCURRENCY: '1' });

const api = () => request(service.app);

/**
 * Holds the database so that the next list statement waits: on PostgreSQL a lock on posts taken
 * in a transaction; on the embedded database the transaction itself, which holds its one session.
 */
async function holdDatabase(): Promise<Knex.Transaction> {
  const trx = await service.db.knex.transaction();
  if (usingPostgres()) await trx.raw('LOCK TABLE posts IN ACCESS EXCLUSIVE MODE');
  return trx;
}

test('When as many unindexed searches run as the limit allows, then one more is 503 with Retry-After at once, and once they end such searches are answered again', async () => {
  const post = await newPost(service.app, dana, { title: 'qx marks the spot' });
  const held = await holdDatabase();
  let running: Promise<request.Response> | undefined;
  let refused: request.Response;
  let refusedMs: number;
  try {
    // Takes the one slot and waits on the held database.
    running = api()
      .get('/posts/public?search=qx')
      .then((res) => res);
    const polled = await pollUntil(
      async () => {
        const started = Date.now();
        const res = await api().get('/posts/?search=%25%25').set(bearer(dana));
        return { res, ms: Date.now() - started };
      },
      ({ res }) => res.status === 503,
      { withinMs: 1500, everyMs: 50 },
    );
    refused = polled.value.res;
    refusedMs = polled.value.ms;
  } finally {
    await held.commit();
  }
  const problem = expectProblem(refused, 503);
  expect(problem.detail).toMatch(/Too many searches without three letters or digits/);
  expect(refused.headers['retry-after']).toBe('1');
  // Refused without waiting for the database.
  expect(refusedMs).toBeLessThan(1000);

  const first = await running;
  expect(first.status).toBe(200);
  expect((first.body as { id: number }[]).map((p) => p.id)).toEqual([post.id]);
  // The slot is free again: a short search on either list is served.
  const again = await api().get('/posts/?search=Qx').set(bearer(dana)).expect(200);
  expect((again.body as { id: number }[]).map((p) => p.id)).toEqual([post.id]);
});

// The embedded database's held session fails a statement only after knex's 60 s acquire time-out.
testOnPostgres(
  'When an unindexed search fails (the database held past its time-outs), then its slot is freed all the same',
  async () => {
    const held = await holdDatabase();
    let failed: request.Response;
    try {
      failed = await api().get('/posts/public?search=zz');
    } finally {
      await held.commit();
    }
    // The database's 503 (a statement or connection time-out), not the limit's.
    expect(expectProblem(failed, 503).detail).not.toMatch(/Too many searches/);
    for (let i = 0; i < 3; i += 1) expect((await api().get('/posts/public?search=zz')).status).toBe(200);
  },
);

test('When a search has three letters or digits in a row, then the limit does not apply to it', async () => {
  const post = await newPost(service.app, dana, { title: 'abc123 indexed' });
  const held = await holdDatabase();
  let unindexed: Promise<request.Response> | undefined;
  let indexed: Promise<request.Response> | undefined;
  try {
    unindexed = api()
      .get('/posts/public?search=%25')
      .then((res) => res);
    // Give the short search time to take the slot before the long one arrives.
    await sleep(200);
    indexed = api()
      .get('/posts/public?search=c12')
      .then((res) => res);
    await sleep(200);
  } finally {
    await held.commit();
  }
  expect((await unindexed).status).toBe(200);
  const found = await indexed;
  expect(found.status).toBe(200);
  expect((found.body as { id: number }[]).map((p) => p.id)).toEqual([post.id]);
});
