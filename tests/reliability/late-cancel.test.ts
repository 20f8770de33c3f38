/**
 * A cancel request travels on a connection of its own, so it can reach the server after the
 * statement it was sent for has answered and the next one has started. Inside a transaction that
 * next one may be the COMMIT, waiting for a synchronous standby: the late cancel ends that wait,
 * PostgreSQL keeps the commit on the primary alone and answers success with a warning, and the
 * change must not be acknowledged as though the standby had it.
 */
import { Relay } from '../../tools/harness/relay';
import { detailOf } from '../../tools/harness/problem';
import { queryServer } from '../../tools/harness/postgres';
import { account, call, isProblem, OwnPostgres, report, startOn, stopAllServices } from './support';

const STATEMENT_TIMEOUT_MS = 1000;

const own = new OwnPostgres();
const relay = new Relay(0);

beforeAll(async () => {
  await own.init();
  own.start();
  relay.retarget(own.port);
  await relay.start();
});

afterAll(async () => {
  await stopAllServices();
  await relay.close();
  own.destroy();
});

const setting = async (value: string) => {
  await queryServer(own.port, 'postgres', `ALTER SYSTEM SET synchronous_standby_names = '${value}'`);
  await queryServer(own.port, 'postgres', 'SELECT pg_reload_conf()');
};

test("When a statement of a change's transaction answers just past its deadline and the cancel sent for it arrives late, during the COMMIT's wait for a synchronous standby that never confirms, then the change is not acknowledged", async () => {
  const svc = await startOn(relay.port, 'postgres', {
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    DB_POOL_MAX: '2',
  });
  const token = await account(svc.base, 'late-cancel@example.com');
  const made = await call(svc.base, '/posts/', { token, json: { title: 'before', content: 'c' } });
  const id = (made.body as { id: number }).id;
  const etag = (await call(svc.base, `/posts/${String(id)}`, { token })).headers.get('etag') ?? '*';

  // Every commit from now on waits for a standby that never comes, until a cancel ends the wait.
  await setting('nobody');
  // The UPDATE's answer comes within the cancel's grace; the cancel sent at its deadline comes later.
  relay.delayAnswerTo('update "posts" set', STATEMENT_TIMEOUT_MS + 150);
  relay.delayCancels(400);
  const put = await call(svc.base, `/posts/${String(id)}`, {
    method: 'PUT',
    token,
    json: { title: 'after', content: 'c' },
    headers: { 'If-Match': etag },
  });
  relay.delayCancels(0);
  await setting('');
  const [stored] = await queryServer<{ title: string }>(
    own.port,
    'postgres',
    'SELECT title FROM posts WHERE id = $1',
    [id],
  );
  report('late cancel', {
    put: `${String(put.status)} ${detailOf(put)}`,
    ms: Math.round(put.ms),
    stored: stored?.title,
  });

  // Acknowledged, the change would be lost with the primary: the standby never had it.
  expect(put.status).toBe(503);
  expect(isProblem(put)).toBe(true);
  expect(put.retryAfter).toBe('1');
  // Whatever the answer says, it is true of what the primary holds.
  if (stored?.title === 'after') expect(detailOf(put)).toMatch(/may or may not stand/);
});
