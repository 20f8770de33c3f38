/**
 * Failed logins must not slow unrelated requests. bcrypt and request decompression (zlib) share
 * libuv's four threads; without a bound, a few clients sending wrong passwords would keep every
 * thread hashing, and each gzip-bodied request would wait its turn behind them.
 * PASSWORD_HASH_CONCURRENCY (2) leaves the other threads to decompression (docs/benchmarks.md,
 * "Login and the threadpool"; `npm run bench:login` measures it).
 */
import { gzipSync } from 'node:zlib';
import {
  account,
  call,
  p50,
  report,
  scratchDatabase,
  sleep,
  startService,
  statusCounts,
  whileRunning,
  type Answer,
} from './support';

/** Failed-login clients, each sending its next as soon as the last is answered. */
const ATTACKERS = 16;
const ATTACK_MS = 8000;
/** What a client of a gzip-bodied write may expect while logins are refused around it, with margin. */
const GZIP_POST_P50_MS = 1000;

const database = scratchDatabase('login_starvation');
const GZIP_BODY = gzipSync(JSON.stringify({ title: 'gzip-bodied post', content: 'x'.repeat(2000) }));

/** A gzip-bodied POST /posts/ as `token`'s user, timed. */
const postGzipped = (base: string, token: string): Promise<Answer> =>
  call(base, '/posts/', {
    token,
    headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' },
    body: GZIP_BODY,
    timeoutMs: 20_000,
  });

/**
 * `ATTACKERS` clients sending `email`'s login with a wrong password for `ATTACK_MS`, while one
 * client sends gzip-bodied posts beside them: every answer of each, and what failed outright.
 */
async function wrongPasswords(base: string, email: string, gzipPost: () => Promise<Answer>) {
  const failedLogins: Answer[] = [];
  const posts: Answer[] = [];
  const attacker = async () => {
    failedLogins.push(
      await call(base, '/login', {
        form: { username: email, password: 'not the password' },
        timeoutMs: 30_000,
      }),
    );
  };
  const poster = async (i: number) => {
    // Once the logins fill the queue of hashes, not before.
    if (i === 0) await sleep(1000);
    posts.push(await gzipPost());
  };
  const failures = await whileRunning(ATTACK_MS, [
    ...Array.from({ length: ATTACKERS }, () => attacker),
    poster,
  ]);
  return { failedLogins, posts, failures };
}

test('When 16 clients keep sending wrong passwords, then a gzip-bodied POST /posts/ beside them stays quick and none fails', async () => {
  const svc = await startService({
    DB_NAME: database.name,
    // The production cost (settings' default), not the suites' cheap one: it is the point here.
    BCRYPT_ROUNDS: '12',
  });
  const email = 'login-starvation@example.com';
  const token = await account(svc.base, email);
  const gzipPost = () => postGzipped(svc.base, token);
  // Warm the statements and the pool, then the quiet figure.
  const quiet: number[] = [];
  for (let i = 0; i < 10; i++) quiet.push((await gzipPost()).ms);

  const { failedLogins, posts, failures } = await wrongPasswords(svc.base, email, gzipPost);

  const during = posts.map((a) => a.ms);
  report('failed logins beside gzip-bodied posts', {
    attackers: ATTACKERS,
    failedLogins: statusCounts(failedLogins),
    failedLoginP50Ms: Math.round(p50(failedLogins.map((a) => a.ms))),
    posts: statusCounts(posts),
    quietP50Ms: Math.round(p50(quiet)),
    duringP50Ms: Math.round(p50(during)),
    duringMaxMs: Math.round(Math.max(...during)),
    failures: failures.length,
  });

  expect(failures).toEqual([]);
  // The attack happened: logins were refused, one after another, all through it.
  expect(failedLogins.length).toBeGreaterThanOrEqual(ATTACKERS);
  expect(failedLogins.every((a) => a.status === 403)).toBe(true);
  expect(posts.length).toBeGreaterThan(0);
  expect(posts.every((a) => a.status === 201)).toBe(true);
  expect(p50(during)).toBeLessThan(GZIP_POST_P50_MS);
});
