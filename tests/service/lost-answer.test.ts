/**
 * A change whose answer from PostgreSQL never arrives: the statement (or the COMMIT) reached the
 * server, which acted on it, and the connection went silent after. Such a change may stand, so
 * the client must not be told to try again (a retried POST would make a second post); it is told
 * to read the change back. A statement lost inside a transaction that never committed is undone
 * by the server when the connection goes, so there "try again" is the truth.
 */
import type { Knex } from 'knex';
import { call, type Answer } from '../../tools/harness/client';
import { detailOf, problemFaults } from '../../tools/harness/problem';
import { Relay } from '../../tools/harness/relay';
import { countOf, postgresServer } from '../../tools/harness/postgres';
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
const IN_DOUBT = 'may or may not stand; read it back';
const TRY_AGAIN = 'try again shortly';

describeOnPostgres('On PostgreSQL, behind a link that can lose an answer', () => {
  let relay: Relay;
  let server: TestServer;
  let admin: Knex;
  let owner: Account;

  beforeAll(async () => {
    relay = new Relay(postgresServer.port, postgresServer.host);
    await relay.start();
    server = await startTestServer({
      DB_PORT: String(relay.port),
      DB_STATEMENT_TIMEOUT_MS: String(BUDGET_MS),
    });
    admin = await connectionBeside(server.db);
    owner = await newAccount(server.base);
  });
  afterAll(async () => {
    await admin.destroy();
    await server.close();
    await relay.close();
  });

  const newPost = () => newTaggedPost(server.base, owner, { title: 't', content: 'c' });

  /** `request`'s answer when the answer to the statement holding `marker` is lost. */
  const losing = async (marker: string, request: () => Promise<Answer>) => {
    relay.loseAnswerTo(marker);
    const answer = await request();
    expect(answer.status).toBe(503);
    expect(problemFaults(answer)).toEqual([]);
    expect(answer.retryAfter).toBe('1');
    return answer;
  };

  test("When the answer to a new post's INSERT is lost, then the client is told the change may or may not stand, and the post is stored", async () => {
    const title = `lost-insert-${String(process.pid)}`;
    const answer = await losing('insert into "posts"', () =>
      call(server.base, '/posts/', { token: owner.token, json: { title, content: 'c' } }),
    );
    expect(detailOf(answer)).toContain(IN_DOUBT);
    expect(await countOf(admin, 'posts WHERE title = ?', [title])).toBe(1);
  });

  test("When the answer to a new post's INSERT sent with an Idempotency-Key is lost, then the retry with that key answers 201 with the post the first try made, and no second post is stored", async () => {
    const title = `lost-keyed-${String(process.pid)}`;
    const send = () =>
      call(server.base, '/posts/', {
        token: owner.token,
        headers: { 'Idempotency-Key': title },
        json: { title, content: 'c' },
      });
    const lost = await losing('insert into "posts"', send);
    const retried = await send();

    expect(detailOf(lost)).toContain(IN_DOUBT);
    expect(retried.status).toBe(201);
    expect((retried.body as { title: string }).title).toBe(title);
    expect(await countOf(admin, 'posts WHERE title = ?', [title])).toBe(1);
  });

  test("When the answer to a vote's INSERT (a prepared statement) is lost, then the client is told the change may or may not stand, and the vote is stored", async () => {
    const { id } = await newPost();
    const answer = await losing('vote_insert', () =>
      call(server.base, '/votes/', { token: owner.token, json: { post_id: id, dir: 1 } }),
    );
    expect(detailOf(answer)).toContain(IN_DOUBT);
    expect(await countOf(admin, 'votes WHERE post_id = ?', [id])).toBe(1);
  });

  test("When the answer to a conditional DELETE's COMMIT is lost, then the client is told the change may or may not stand, and the post is gone", async () => {
    const { id, etag } = await newPost();
    const answer = await losing('COMMIT', () =>
      call(server.base, `/posts/${id}`, {
        method: 'DELETE',
        token: owner.token,
        headers: { 'If-Match': etag },
      }),
    );
    expect(detailOf(answer)).toContain(IN_DOUBT);
    expect(await countOf(admin, 'posts WHERE id = ?', [id])).toBe(0);
  });

  test('When the answer to a DELETE inside its transaction is lost (no COMMIT sent), then the client is told to try again, the post is still there, and the retry deletes it', async () => {
    const { id, etag } = await newPost();
    const remove = () =>
      call(server.base, `/posts/${id}`, {
        method: 'DELETE',
        token: owner.token,
        headers: { 'If-Match': etag },
      });
    const answer = await losing('delete from "posts"', remove);
    expect(detailOf(answer)).toContain(TRY_AGAIN);
    expect(await countOf(admin, 'posts WHERE id = ?', [id])).toBe(1);
    expect((await remove()).status).toBe(204);
  });
});
