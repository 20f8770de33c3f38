/**
 * A transaction that ends at the edge of its request's database budget: its COMMIT or ROLLBACK
 * must still reach PostgreSQL, or its connection goes back to the pool inside the transaction and
 * the next requests drawn on it run there (acknowledged, never committed). The post's row is held
 * by another session until the budget's last moments, and deleting or updating it takes a while (a
 * trigger sleeps), so the budget often runs out between the DELETE and its COMMIT; one pooled connection
 * makes every later request draw the connection the conditional DELETE used. A PUT at the same
 * edge answers with the post as its own statement changed it: its 200 and its 503 each say what
 * the database holds.
 */
import type { Knex } from 'knex';
import { call, sleep, type Answer } from '../../tools/harness/client';
import { problemFaults } from '../../tools/harness/problem';
import {
  describeOnPostgres,
  newAccount,
  newTaggedPost,
  connectionBeside,
  startTestServer,
  type Account,
  type TestServer,
} from './helpers';

const BUDGET_MS = 1000;
/** How long the other session holds the post, round by round: either side of the budget's end. */
const HOLDS_MS = Array.from({ length: 24 }, (_, i) => 780 + i * 8);
const DELETE_TAKES_S = 0.08;
const UPDATE_TAKES_S = 0.08;
const POSTS_PER_ROUND = 3;

describeOnPostgres('On PostgreSQL, with one pooled connection and a budget of 1 s', () => {
  let server: TestServer;
  let admin: Knex;
  let owner: Account;

  beforeAll(async () => {
    server = await startTestServer({ DB_POOL_MAX: '1', DB_STATEMENT_TIMEOUT_MS: String(BUDGET_MS) });
    admin = await connectionBeside(server.db);
    owner = await newAccount(server.base);
    await admin.raw(`CREATE FUNCTION test_slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(${DELETE_TAKES_S}); RETURN OLD; END $$`);
    await admin.raw(
      'CREATE TRIGGER test_slow_delete BEFORE DELETE ON posts FOR EACH ROW EXECUTE FUNCTION test_slow_delete()',
    );
    await admin.raw(`CREATE FUNCTION test_slow_update() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(${UPDATE_TAKES_S}); RETURN NEW; END $$`);
    await admin.raw(
      'CREATE TRIGGER test_slow_update BEFORE UPDATE ON posts FOR EACH ROW EXECUTE FUNCTION test_slow_update()',
    );
  });
  afterAll(async () => {
    await admin.destroy();
    await server.close();
  });

  /** A request as the owner, its body sent as JSON, through the harness's client. */
  const send = (
    method: string,
    path: string,
    init: { body?: object; headers?: Record<string, string> } = {},
  ): Promise<Answer> =>
    call(server.base, path, { method, token: owner.token, json: init.body, headers: init.headers });
  /** The post an answer carries. */
  const postOf = (answer: Answer) => answer.body as { id: number; title: string };

  /** A new post titled `title`, and its ETag. */
  const newPost = (title: string) =>
    newTaggedPost(server.base, owner, { title, content: 'held at the edge' });

  /** `request`'s answer, sent while another session holds post `id`'s row for `holdMs`. */
  const whileHeld = async (id: number, holdMs: number, request: () => Promise<Answer>) => {
    const holder = await admin.transaction();
    await holder.raw('SELECT 1 FROM posts WHERE id = ? FOR UPDATE', [id]);
    const answering = request();
    await sleep(holdMs);
    await holder.rollback();
    return answering;
  };

  test('When a conditional DELETE gets its post row only at the end of its budget, round after round, then every post acknowledged afterwards is committed, every answer is 204 or a 503 problem, and no connection is left inside a transaction', async () => {
    const acknowledged: number[] = [];
    const deletes: Record<number, number> = {};
    for (const holdMs of HOLDS_MS) {
      const { id, etag } = await newPost('held');
      const deleted = await whileHeld(id, holdMs, () =>
        send('DELETE', `/posts/${id}`, { headers: { 'If-Match': etag } }),
      );
      deletes[deleted.status] = (deletes[deleted.status] ?? 0) + 1;
      expect([204, 503]).toContain(deleted.status);
      if (deleted.status === 503) expect(problemFaults(deleted)).toEqual([]);
      // What the answer said is what the database holds.
      const { rows: left } = await admin.raw<{ rows: unknown[] }>('SELECT 1 FROM posts WHERE id = ?', [id]);
      expect(left.length).toBe(deleted.status === 204 ? 0 : 1);

      for (let n = 0; n < POSTS_PER_ROUND; n++) {
        const after = await send('POST', '/posts/', {
          body: { title: 'after', content: `after ${holdMs} ms` },
        });
        expect([201, 503]).toContain(after.status);
        if (after.status === 201) acknowledged.push(postOf(after).id);
      }
    }

    const { rows: committed } = await admin.raw<{ rows: { id: number }[] }>(
      'SELECT id FROM posts WHERE id = ANY(?)',
      [acknowledged],
    );
    const { rows: inTransaction } = await admin.raw<{ rows: { state: string }[] }>(
      // This server's connections: the other suites' servers share PostgreSQL but each has a database of its own.
      "SELECT state FROM pg_stat_activity WHERE application_name = 'social-posts' AND datname = current_database() AND state LIKE 'idle in transaction%'",
    );
    console.log(
      JSON.stringify({
        deletes,
        acknowledged: acknowledged.length,
        committed: committed.length,
        inTransaction,
      }),
    );
    expect(acknowledged.length).toBeGreaterThan(HOLDS_MS.length * POSTS_PER_ROUND * 0.9);
    expect(committed.length).toBe(acknowledged.length);
    expect(inTransaction).toEqual([]);
  });

  test.each([
    ['without If-Match', false],
    ['with If-Match', true],
  ])(
    'When a PUT (%s) gets its post row only at the end of its budget, round after round, then a 200 carries the change the database holds and a 503 problem leaves the post as it was, so trying again succeeds',
    async (_label, conditional) => {
      const statuses: Record<number, number> = {};
      for (const holdMs of HOLDS_MS) {
        const { id, etag } = await newPost('before');
        const put = () =>
          send('PUT', `/posts/${id}`, {
            body: { title: `after ${String(holdMs)}`, content: 'held' },
            headers: conditional ? { 'If-Match': etag } : {},
          });
        const answer = await whileHeld(id, holdMs, put);
        statuses[answer.status] = (statuses[answer.status] ?? 0) + 1;
        expect([200, 503]).toContain(answer.status);
        const { rows } = await admin.raw<{ rows: { title: string }[] }>(
          'SELECT title FROM posts WHERE id = ?',
          [id],
        );
        if (answer.status === 200) {
          expect(postOf(answer).title).toBe(`after ${String(holdMs)}`);
          expect(rows[0]?.title).toBe(postOf(answer).title);
        } else {
          expect(problemFaults(answer)).toEqual([]);
          expect(rows[0]?.title).toBe('before');
          // What a client told to try again does: the same request, which its own change never stands in the way of.
          expect((await put()).status).toBe(200);
        }
      }
      console.log(JSON.stringify({ conditional, statuses }));
    },
  );
});
