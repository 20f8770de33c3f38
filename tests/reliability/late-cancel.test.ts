/**
 * A cancel that ends a commit's wait for a synchronous standby leaves the commit on the primary
 * alone: PostgreSQL answers success with a warning, and every session then sees the change. It must
 * not be acknowledged as though the standby had it: not when the cancel arrives late (it travels on
 * a connection of its own and can land on the transaction's COMMIT), not when someone else sent it,
 * and not through a retry, which finds the change already there.
 */
import { Relay } from '../../tools/harness/relay';
import { detailOf } from '../../tools/harness/problem';
import { pollUntil } from '../../tools/harness/poll';
import { queryServer } from '../../tools/harness/postgres';
import { serviceEnv } from '../../tools/harness/env';
import { spawnScript } from '../../tools/harness/service';
import {
  account,
  call,
  isProblem,
  OwnPostgres,
  report,
  sleep,
  startOn,
  stopAllServices,
  vote,
  type Answer,
} from './support';

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

/** Runs `work` while every commit waits for a standby that never comes, until a cancel ends the wait. */
async function whileNoStandbyConfirms<T>(work: () => Promise<T>): Promise<T> {
  await setting('nobody');
  try {
    return await work();
  } finally {
    await setting('');
  }
}

test("When a statement of a change's transaction answers just past its deadline and the cancel sent for it arrives late, during the COMMIT's wait for a synchronous standby that never confirms, then the change is not acknowledged", async () => {
  const svc = await startOn(relay.port, 'postgres', {
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    DB_POOL_MAX: '2',
  });
  const token = await account(svc.base, 'late-cancel@example.com');
  const made = await call(svc.base, '/posts/', { token, json: { title: 'before', content: 'c' } });
  const id = (made.body as { id: number }).id;
  const etag = (await call(svc.base, `/posts/${String(id)}`, { token })).headers.get('etag') ?? '*';

  const put = await whileNoStandbyConfirms(async () => {
    // The UPDATE's answer comes within the cancel's grace; the cancel sent at its deadline comes later.
    relay.delayAnswerTo('update "posts" set', STATEMENT_TIMEOUT_MS + 150);
    relay.delayCancels(400);
    try {
      return await call(svc.base, `/posts/${String(id)}`, {
        method: 'PUT',
        token,
        json: { title: 'after', content: 'c' },
        headers: { 'If-Match': etag },
      });
    } finally {
      relay.delayCancels(0);
    }
  });
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

const MAY_OR_MAY_NOT_STAND = /may or may not stand/;

/** The cases whose first request is another: the registration of the account they log in to, the post's deletion. */
const FIRST: Record<string, string> = {
  login: 'registration',
  rehash: 'registration',
  voteOnDeleted: 'deletion',
};

/** A 503 whose detail says what `detail` does: by default, that the change may or may not stand. */
const mayOrMayNotStand = (answer: Answer, detail = MAY_OR_MAY_NOT_STAND) => {
  expect(answer.status).toBe(503);
  expect(detailOf(answer)).toMatch(detail);
};

test("When someone else's cancel (an operator's pg_cancel_backend) ends a change's wait for a synchronous standby that never confirms, then the change is not acknowledged", async () => {
  const deadlineMs = 10_000;
  const svc = await startOn(own.port, 'postgres', { DB_STATEMENT_TIMEOUT_MS: String(deadlineMs) });
  const token = await account(svc.base, 'cancelled-by-another@example.com');
  const answer = await whileNoStandbyConfirms(async () => {
    const made = call(svc.base, '/posts/', { token, json: { title: 'waiting', content: 'c' } });
    const waiting = await pollUntil(
      () =>
        queryServer<{ pid: number }>(
          own.port,
          'postgres',
          "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query ILIKE 'insert into \"posts\"%'",
        ),
      (rows) => rows.length === 1,
      { withinMs: 5000, everyMs: 50 },
    );
    expect(waiting.held).toBe(true);
    await queryServer(own.port, 'postgres', 'SELECT pg_cancel_backend($1)', [waiting.value[0]?.pid]);
    return made;
  });
  report('cancelled by another', {
    post: `${String(answer.status)} ${detailOf(answer)}`,
    ms: Math.round(answer.ms),
  });
  mayOrMayNotStand(answer);
  // Told by the cancel's warning, not by the service's own deadline, which is far off.
  expect(answer.ms).toBeLessThan(deadlineMs);
});

test.each([
  ['a post retried with its Idempotency-Key', 'post', MAY_OR_MAY_NOT_STAND, 201],
  ['a vote cast again', 'vote', MAY_OR_MAY_NOT_STAND, 409],
  ['a registration sent again', 'registration', MAY_OR_MAY_NOT_STAND, 409],
  ['a deletion sent again', 'deletion', MAY_OR_MAY_NOT_STAND, 404],
  ['a withdrawal sent again', 'withdrawal', MAY_OR_MAY_NOT_STAND, 404],
  ['an edit sent again with the ETag read back', 'edit', MAY_OR_MAY_NOT_STAND, 200],
  ['an edit sent again with its first ETag', 'resent', MAY_OR_MAY_NOT_STAND, 412],
  // The post gone may be the owner's own deletion, which a failover would bring back.
  ['a vote on the post after its deletion', 'voteOnDeleted', MAY_OR_MAY_NOT_STAND, 404],
  // No token names an account that a failover would lose, its id then another's.
  ['a login after the registration', 'login', /cannot confirm the account/, 200],
  [
    'a login after the registration that hashes the password again',
    'rehash',
    /cannot confirm the account/,
    200,
  ],
])(
  "When %s finds the first request's change on the primary alone, then it is not acknowledged until the synchronous standby has the change",
  async (label, name, unconfirmed, confirmed) => {
    const env = { DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS) };
    const svc = await startOn(own.port, 'postgres', env);
    const token = await account(svc.base, `retried-${name}@example.com`);
    const made = await call(svc.base, '/posts/', { token, json: { title: 'to vote on', content: 'c' } });
    const postId = (made.body as { id: number }).id;
    if (name === 'withdrawal') expect((await vote(svc.base, token, postId, 1)).status).toBe(201);
    // An address of this case's own: the registration a login follows is a new account's.
    const credentials = { email: `registered-by-${name}@example.com`, password: 'a long enough password' };
    const logIn = (on: { base: string }) =>
      call(on.base, '/login', { form: { username: credentials.email, password: credentials.password } });
    // Another replica, whose other cost makes the login store a new hash first; started before
    // commits wait, as its start would.
    const rehasher =
      name === 'rehash' ? await startOn(own.port, 'postgres', { ...env, BCRYPT_ROUNDS: '5' }) : svc;
    const firstTag = (await call(svc.base, `/posts/${String(postId)}`, { token })).headers.get('etag');
    const edit = (etag: string | null) => {
      expect(etag).toBeTruthy();
      return call(svc.base, `/posts/${String(postId)}`, {
        method: 'PUT',
        token,
        json: { title: 'edited once', content: 'c' },
        headers: { 'If-Match': String(etag) },
      });
    };
    const send: Record<string, () => Promise<Answer>> = {
      post: () =>
        call(svc.base, '/posts/', {
          token,
          json: { title: 'kept once', content: 'c' },
          headers: { 'Idempotency-Key': 'retried-once' },
        }),
      vote: () => vote(svc.base, token, postId, 1),
      voteOnDeleted: () => vote(svc.base, token, postId, 1),
      registration: () => call(svc.base, '/users/', { json: credentials }),
      deletion: () => call(svc.base, `/posts/${String(postId)}`, { method: 'DELETE', token }),
      withdrawal: () => vote(svc.base, token, postId, 0),
      edit: async () =>
        edit((await call(svc.base, `/posts/${String(postId)}`, { token })).headers.get('etag')),
      resent: () => edit(firstTag),
      login: () => logIn(svc),
      rehash: () => logIn(rehasher),
    };
    const request = send[name] as () => Promise<Answer>;
    const firstRequest = send[FIRST[name] ?? name] as () => Promise<Answer>;
    const [first, retried] = await whileNoStandbyConfirms(async () => [
      await firstRequest(),
      await request(),
    ]);
    const afterwards = await request();
    report(label, {
      first: `${String(first.status)} ${detailOf(first)}`,
      retried: `${String(retried.status)} ${detailOf(retried)}`,
      afterwards: afterwards.status,
    });
    // The first commit stands on the primary alone: the retry finds it, and must not say it stands.
    mayOrMayNotStand(first);
    mayOrMayNotStand(retried, unconfirmed);
    expect(afterwards.status).toBe(confirmed);
  },
);

test('When synchronous_commit is local for the database, then the service starts while the server names no synchronous standby (local is then what on does), and does not while it names one: it would acknowledge commits no standby has', async () => {
  await queryServer(own.port, 'postgres', 'CREATE DATABASE local_commits');
  await queryServer(own.port, 'postgres', 'ALTER DATABASE local_commits SET synchronous_commit = local');
  const alone = await startOn(own.port, 'local_commits');
  await alone.stop();
  // Its commits skip the wait, so the migrations go through and the settings are read.
  const svc = await whileNoStandbyConfirms(async () => {
    const started = spawnScript(
      'service/src/main.ts',
      serviceEnv({
        DB_HOSTNAME: '127.0.0.1',
        DB_PORT: String(own.port),
        DB_NAME: 'local_commits',
        LOG_LEVEL: 'info',
      }),
    );
    await Promise.race([started.exited, sleep(30_000)]);
    await started.stop();
    return started;
  });
  await queryServer(own.port, 'postgres', 'DROP DATABASE local_commits');
  expect(await svc.exited).toBe(1);
  expect(svc.lines.filter((line) => line.level === 60).map((line) => line.msg)).toEqual([
    'synchronous_commit is local for DB_USERNAME=postgres on DB_NAME=local_commits, which acknowledges a commit before the synchronous standby the server names (synchronous_standby_names) has it, so a failover would lose an acknowledged change: set it to on (or remote_write, remote_apply) (ALTER DATABASE "local_commits" RESET synchronous_commit); not starting',
  ]);
});
