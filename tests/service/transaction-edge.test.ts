/**
 * A transaction that ends at the edge of its request's database budget: its COMMIT or ROLLBACK
 * must still reach PostgreSQL, or its connection goes back to the pool inside the transaction and
 * the next requests drawn on it run there (acknowledged, never committed). The post's row is held
 * by another session until the budget's last moments, and deleting it takes a while (a trigger
 * sleeps), so the budget often runs out between the DELETE and its COMMIT; one pooled connection
 * makes every later request draw the connection the conditional DELETE used.
 */
import type { Knex } from 'knex';
import { sleep } from '../../tools/harness/client';
import { problemFaults } from '../../tools/harness/problem';
import {
  bearer,
  describeOnPostgres,
  newAccount,
  postgresConnection,
  startTestServer,
  type Account,
  type TestServer,
} from './helpers';

const BUDGET_MS = 1000;
/** How long the other session holds the post, round by round: either side of the budget's end. */
const HOLDS_MS = Array.from({ length: 24 }, (_, i) => 780 + i * 8);
const DELETE_TAKES_S = 0.08;
const POSTS_PER_ROUND = 3;

describeOnPostgres('On PostgreSQL, with one pooled connection and a budget of 1 s', () => {
  let server: TestServer;
  let admin: Knex;
  let owner: Account;

  beforeAll(async () => {
    server = await startTestServer({ DB_POOL_MAX: '1', DB_STATEMENT_TIMEOUT_MS: String(BUDGET_MS) });
    const { rows } = await server.db.knex.raw<{ rows: { name: string }[] }>(
      'SELECT current_database() AS name',
    );
    admin = postgresConnection(rows[0]?.name);
    owner = await newAccount(server.base);
    await admin.raw(`CREATE FUNCTION test_slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(${DELETE_TAKES_S}); RETURN OLD; END $$`);
    await admin.raw(
      'CREATE TRIGGER test_slow_delete BEFORE DELETE ON posts FOR EACH ROW EXECUTE FUNCTION test_slow_delete()',
    );
  });
  afterAll(async () => {
    await admin.destroy();
    await server.close();
  });

  const call = async (
    method: string,
    path: string,
    init: { body?: object; headers?: Record<string, string> } = {},
  ) => {
    const res = await fetch(`${server.base}${path}`, {
      method,
      headers: {
        ...bearer(owner),
        'Content-Type': 'application/json',
        ...init.headers,
      },
      body: init.body ? JSON.stringify(init.body) : undefined,
    });
    const text = await res.text();
    return {
      status: res.status,
      headers: res.headers,
      body: text ? (JSON.parse(text) as Record<string, unknown>) : {},
    };
  };

  test('When a conditional DELETE gets its post row only at the end of its budget, round after round, then every post acknowledged afterwards is committed, every answer is 204 or a 503 problem, and no connection is left inside a transaction', async () => {
    const acknowledged: number[] = [];
    const deletes: Record<number, number> = {};
    for (const holdMs of HOLDS_MS) {
      const created = await call('POST', '/posts/', { body: { title: 'held', content: 'held at the edge' } });
      expect(created.status).toBe(201);
      const id = created.body.id as number;
      const etag = (await call('GET', `/posts/${id}`)).headers.get('etag') ?? '';

      const holder = await admin.transaction();
      await holder.raw('SELECT 1 FROM posts WHERE id = ? FOR UPDATE', [id]);
      const deleting = call('DELETE', `/posts/${id}`, { headers: { 'If-Match': etag } });
      await sleep(holdMs);
      await holder.rollback();
      const deleted = await deleting;
      deletes[deleted.status] = (deletes[deleted.status] ?? 0) + 1;
      expect([204, 503]).toContain(deleted.status);
      if (deleted.status === 503)
        expect(
          problemFaults({
            status: 503,
            contentType: deleted.headers.get('content-type') ?? '',
            body: deleted.body,
          }),
        ).toEqual([]);
      // What the answer said is what the database holds.
      const { rows: left } = await admin.raw<{ rows: unknown[] }>('SELECT 1 FROM posts WHERE id = ?', [id]);
      expect(left.length).toBe(deleted.status === 204 ? 0 : 1);

      for (let n = 0; n < POSTS_PER_ROUND; n++) {
        const after = await call('POST', '/posts/', {
          body: { title: 'after', content: `after ${holdMs} ms` },
        });
        expect([201, 503]).toContain(after.status);
        if (after.status === 201) acknowledged.push(after.body.id as number);
      }
    }

    const { rows: committed } = await admin.raw<{ rows: { id: number }[] }>(
      'SELECT id FROM posts WHERE id = ANY(?)',
      [acknowledged],
    );
    const { rows: inTransaction } = await admin.raw<{ rows: { state: string }[] }>(
      "SELECT state FROM pg_stat_activity WHERE application_name = 'social-posts' AND state LIKE 'idle in transaction%'",
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
});
