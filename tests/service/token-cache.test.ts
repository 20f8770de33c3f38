import jwt from 'jsonwebtoken';
import { createLogger } from '../../service/src/logger';
import { startServer, type RunningServer } from '../../service/src/server';
import { keyId, loadSettings } from '../../service/src/settings';
import { call, sleep } from '../../tools/harness/client';
import { samples } from '../../tools/harness/metrics-text';
import {
  bearer,
  newAccount,
  nextWholeSecond,
  openMigratedDatabase,
  releaseShutdownSignals,
  signToken,
  stopServer,
  TEST_SECRET,
  testEnv,
  type Account,
  type MigratedDatabase,
} from './helpers';

// A key this service never knew, and the key after a rotation.
const FOREIGN = 'a-key-of-some-other-service-0123456789abcdef';
const K2 = 'token-cache-key-two-0123456789abcdef0123456789';

/** A listening service (API and metrics) on the file's database, with its own settings. */
interface Pod {
  base: string;
  /** The sample values of one metric on this pod's /metrics, by their label text ('' for none). */
  metric(name: string): Promise<Map<string, number>>;
  close(): Promise<void>;
}

describe('The cache of verified tokens, through the API and its metrics', () => {
  let database: MigratedDatabase;
  const pods: RunningServer[] = [];
  let account: Account;

  async function pod(overrides: Record<string, string> = {}): Promise<Pod> {
    const logger = createLogger('silent');
    const settings = loadSettings(testEnv({ ...database.env, PORT: '0', METRICS_PORT: '0', ...overrides }));
    const running = await startServer(settings, database.db, logger);
    pods.push(running);
    return {
      base: `http://127.0.0.1:${String(running.port)}`,
      metric: async (name) => {
        const text = await (await fetch(`http://127.0.0.1:${String(running.metricsPort)}/metrics`)).text();
        return new Map(samples(text, name).map((s) => [s.labels, s.value]));
      },
      close: () => stopServer(running.server),
    };
  }

  const checks = async (p: Pod) => {
    const values = await p.metric('auth_token_checks_total');
    const of = (result: string) => values.get(`result="${result}"`) ?? 0;
    return { cached: of('cached'), verified: of('verified'), refused: of('refused') };
  };
  const held = async (p: Pod) => (await p.metric('auth_token_cache_entries')).get('') ?? Number.NaN;
  const list = (p: Pod, token: string) => fetch(`${p.base}/posts/`, { headers: bearer(token) });
  /** A token as the service signs them, each one distinct by its expiry. */
  const signed = (key: string, options: jwt.SignOptions = {}) =>
    signToken(
      // The default TOKEN_ISSUER: a token naming no issuer is never kept (tokens.ts, legacy window).
      { sub: String(account.user.id), iss: 'social-posts', aud: 'social-posts' },
      { key, keyid: keyId(key), ...options },
    );

  beforeAll(async () => {
    database = await openMigratedDatabase();
    const first = await pod();
    account = await newAccount(first.base);
    await first.close();
  });

  afterAll(async () => {
    for (const running of pods) await stopServer(running.server);
    releaseShutdownSignals();
    await database.close();
  });

  test('When a token is used again, then the answer is the same and it is found in the cache instead of verified again', async () => {
    const p = await pod();
    const first = await list(p, account.token);
    const again = await list(p, account.token);
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(await again.text()).toBe(await first.text());
    expect(await checks(p)).toEqual({ cached: 1, verified: 1, refused: 0 });
    expect(await held(p)).toBe(1);
    await p.close();
  });

  test('When a flood of distinct forged tokens arrives, then each is 401, none enters the cache, and an honest token is still found there', async () => {
    const p = await pod({ TOKEN_CACHE_SIZE: '2' });
    await list(p, account.token);
    const [head = '', body = ''] = account.token.split('.');
    const forged = [
      ...Array.from({ length: 40 }, (_, i) => signed(FOREIGN, { expiresIn: 600 + i })),
      // Our key's id in the header, a signature made with another key.
      ...Array.from({ length: 40 }, (_, i) =>
        signed(FOREIGN, { expiresIn: 600 + i, keyid: keyId(TEST_SECRET) }),
      ),
      // Our own header and claims with a signature that is not theirs.
      ...Array.from(
        { length: 40 },
        (_, i) => `${head}.${body}.${Buffer.from(`x${String(i)}`).toString('base64url')}`,
      ),
      // Signed with our key, but already expired.
      ...Array.from({ length: 20 }, (_, i) =>
        signToken(
          { sub: String(account.user.id), exp: Math.floor(Date.now() / 1000) - 10 - i },
          { keyid: keyId(TEST_SECRET) },
        ),
      ),
      // Signed with our key, with no expiry at all (jsonwebtoken adds none when given no lifetime).
      ...Array.from({ length: 20 }, (_, i) =>
        jwt.sign({ sub: String(account.user.id), iat: Math.floor(Date.now() / 1000) - i }, TEST_SECRET, {
          algorithm: 'HS256',
          keyid: keyId(TEST_SECRET),
        }),
      ),
    ];
    for (const token of forged) {
      const res = await list(p, token);
      expect(res.status).toBe(401);
      await res.arrayBuffer();
    }
    expect(await held(p)).toBe(1);
    expect((await list(p, account.token)).status).toBe(200);
    expect(await checks(p)).toEqual({ cached: 1, verified: 1, refused: forged.length });
    await p.close();
  });

  test('When more distinct valid tokens arrive than it holds, then it holds no more, the first stay in it, and the later ones are still accepted, checked in full', async () => {
    const p = await pod({ TOKEN_CACHE_SIZE: '3' });
    const tokens = Array.from({ length: 6 }, (_, i) => signed(TEST_SECRET, { expiresIn: 600 + i }));
    for (const token of tokens) expect((await list(p, token)).status).toBe(200);
    expect(await held(p)).toBe(3);
    expect((await p.metric('auth_token_cache_capacity')).get('')).toBe(3);
    for (const token of tokens) expect((await list(p, token)).status).toBe(200);
    // The first three found in the cache on their second use; the last three verified both times.
    expect(await checks(p)).toEqual({ cached: 3, verified: 9, refused: 0 });
    expect(await held(p)).toBe(3);
    await p.close();
  });

  test('When a cached token expires, then it is refused 401 from that second on and leaves the cache', async () => {
    const p = await pod();
    await nextWholeSecond();
    const token = signed(TEST_SECRET, { expiresIn: 2 });
    expect((await list(p, token)).status).toBe(200);
    expect((await list(p, token)).status).toBe(200);
    expect(await checks(p)).toMatchObject({ cached: 1, verified: 1 });
    const { exp } = jwt.decode(token) as { exp: number };
    await sleep(exp * 1000 - Date.now() + 50);
    const res = await list(p, token);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { detail: string }).detail).toBe('Could not validate credentials');
    expect(await held(p)).toBe(0);
    expect(await checks(p)).toEqual({ cached: 1, verified: 1, refused: 1 });
    await p.close();
  });

  test('When the user of a cached token is deleted, then that token gets 401 on every route, as before', async () => {
    const p = await pod();
    const gone = await newAccount(p.base);
    const token = gone.token;
    const post = await call(p.base, '/posts/', { token, json: { title: 'soon gone', content: 'c' } });
    expect(post.status).toBe(201);
    const { id } = post.body as { id: number };
    expect((await list(p, token)).status).toBe(200);
    expect(await held(p)).toBe(1);
    await database.db.knex('users').where({ id: gone.user.id }).delete();
    for (const path of ['/posts/', `/posts/${String(id)}`, '/posts/?search=soon'])
      expect((await call(p.base, path, { token })).status).toBe(401);
    expect((await call(p.base, '/votes/', { token, json: { post_id: id, dir: 1 } })).status).toBe(401);
    expect((await checks(p)).cached).toBeGreaterThanOrEqual(4);
    await p.close();
  });

  test('When the accepted keys change, then tokens verified under the old keys count for nothing: the new pod verifies them anew, and refuses those of a key it no longer accepts', async () => {
    const before = await pod();
    const token = signed(TEST_SECRET);
    expect((await list(before, token)).status).toBe(200);
    expect((await list(before, token)).status).toBe(200);
    expect(await checks(before)).toMatchObject({ cached: 1, verified: 1 });
    // The same process, the same database, the keys rotated: SECRET_KEY retired.
    const retired = await pod({ SECRET_KEY: K2 });
    expect(await held(retired)).toBe(0);
    const refused = await list(retired, token);
    expect(refused.status).toBe(401);
    expect(await checks(retired)).toEqual({ cached: 0, verified: 0, refused: 1 });
    // Still accepted where it is one of the keys: verified in full there, then looked up.
    const accepting = await pod({ SECRET_KEY: K2, SECRET_KEYS_ACCEPTED: TEST_SECRET });
    expect((await list(accepting, token)).status).toBe(200);
    expect((await list(accepting, token)).status).toBe(200);
    expect(await checks(accepting)).toEqual({ cached: 1, verified: 1, refused: 0 });
    await before.close();
    await retired.close();
    await accepting.close();
  });
});
