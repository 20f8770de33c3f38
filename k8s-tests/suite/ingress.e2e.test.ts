/**
 * What clients and operators see through ingress-nginx, against whichever target the
 * environment names: K8S_BASE_URL and K8S_HOST (the ingress), K8S_ALLOWED_ORIGINS (the installed
 * environment's CORS allow-list), K8S_DRIVER (local or kind for cases 6 and 7; none skips them), K8S_PROXY
 * (ingress-nginx, or nginx-gateway-fabric for the chart's Gateway API path) and K8S_REPORT_DIR
 * (the proof table). The cases run in order and share one user: case 2 must be
 * the first traffic on /login and /users/ from this address within a minute.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { pollUntil } from '../../tools/harness/poll';
import { writeReport } from '../report';
import {
  baseUrl,
  closeConnections,
  answeredByService,
  host,
  isProblem,
  isProxyPage,
  postForm,
  postJson,
  problemFaultsOf,
  send,
  describeAnswer,
  run,
  tally,
  type Answer,
} from './client';
import { driverFromEnv } from './drivers';

const driver = driverFromEnv();
/** Cases 6 and 7 stop the database and roll the pods: not with K8S_DRIVER=none. */
const platformCase = driver.httpOnly ? test.skip : test;
const allowedOrigins = (process.env.K8S_ALLOWED_ORIGINS ?? '')
  .split(',')
  .map((origin) => origin.trim())
  .filter((origin) => origin !== '');
/** The readiness probe's window (periodSeconds x failureThreshold) plus the service's 1 s check. */
const probeWindowMs = Number(process.env.K8S_PROBE_WINDOW_SECONDS ?? 11) * 1000;
/** Bound for the database and the endpoints to come back after the database starts. */
const recoveryMs = Number(process.env.K8S_RECOVERY_SECONDS ?? 90) * 1000;
/** What routes the requests: the chart's Ingress objects or its HTTPRoutes (gateway.enabled). */
const proxy = process.env.K8S_PROXY ?? 'ingress-nginx';
if (proxy !== 'ingress-nginx' && proxy !== 'nginx-gateway-fabric')
  throw new Error(`K8S_PROXY must be ingress-nginx or nginx-gateway-fabric, not ${proxy}`);
/** ingress-nginx: limit-rpm 10, limit-burst-multiplier 1; NGINX Gateway Fabric: 10r/m, burst 10 (chart values). */
const LIMIT_RPM = 10;
const BURST = LIMIT_RPM * 1;

const email = (label: string) => `e2e-${label}-${run}@example.com`;
const password = 'correct horse battery';
const userA = { username: email('a'), password };
let token = '';
const auth = () => ({ Authorization: `Bearer ${token}` });

const report: Record<string, unknown> = {
  target: `${driver.name}, ${proxy}: ${baseUrl.origin}, Host ${host}`,
};

afterAll(() => {
  writeReport('ingress', { ...report, requests: tally.sent, statuses: tally.statuses });
  closeConnections();
});

/** Sends the requests in this order, each fully written before the next connection opens. */
async function inOrder(requests: ((onWritten: () => void) => Promise<Answer>)[]): Promise<Answer[]> {
  const answers: Promise<Answer>[] = [];
  for (const next of requests) {
    let written!: () => void;
    const isWritten = new Promise<void>((resolvePromise) => (written = resolvePromise));
    const answer = next(written);
    answers.push(answer);
    await Promise.race([isWritten, answer]);
  }
  return Promise.all(answers);
}

/** Asks /healthz/ready, each time on a new connection, until it answers `status` or time runs out. */
const readyAnswers = (status: number, withinMs: number, everyMs: number) =>
  pollUntil(
    () => send('GET', '/healthz/ready', { fresh: true }),
    (answer) => answer.status === status,
    { withinMs, everyMs },
  );

/**
 * Signed-in GETs of `paths` in turn, each on a new connection, until the last `count` statuses
 * are all 200 (or recoveryMs passes); `value` is those last statuses.
 */
const okInARow = (count: number, paths: string[], everyMs: number) => {
  const statuses: number[] = [];
  return pollUntil(
    async () => {
      const path = paths[statuses.length % paths.length] ?? '/';
      statuses.push((await send('GET', path, { headers: auth(), fresh: true })).status);
      return statuses.slice(-count);
    },
    (last) => last.length === count && last.every((status) => status === 200),
    { withinMs: recoveryMs, everyMs },
  );
};

test('When /healthz/live and /healthz/ready are asked through the ingress, then both answer 200 and another host gets 404 (case 1)', async () => {
  for (const path of ['/healthz/live', '/healthz/ready']) {
    const answer = await send('GET', path);
    expect({ path, status: answer.status }).toEqual({ path, status: 200 });
  }
  // Another host is not routed to the release: the controller's default server answers 404.
  const other = await send('GET', '/healthz/live', { host: 'not-this-release.localtest.me' });
  expect(other.status).toBe(404);
});

test('When 13 POSTs to /login and /users/ come back to back, then 11 pass, the rest get 429 from the proxy, and one more passes after ~6 s (case 2)', async () => {
  const firstAt = Date.now();
  const registered = await postJson('/users/', { email: userA.username, password }, { fresh: true });
  expect(registered.status).toBe(201);

  const userB = { email: email('b'), password };
  const wrong = { username: userA.username, password: 'not the password' };
  // Requests 2-11 and then 12-13, written back to back on their own connections, in this order.
  const answers = await inOrder([
    (w) => postForm('/login', userA, { fresh: true, onWritten: w }),
    ...[1, 2, 3, 4].map(
      (i) => (w: () => void) =>
        postJson('/users/', { email: email(`burst${i}`), password }, { fresh: true, onWritten: w }),
    ),
    ...[1, 2, 3, 4, 5].map(() => (w: () => void) => postForm('/login', wrong, { fresh: true, onWritten: w })),
    (w) => postJson('/users/', userB, { fresh: true, onWritten: w }),
    (w) => postForm('/login', { username: userB.email, password }, { fresh: true, onWritten: w }),
  ]);
  const sentFor12Ms = Date.now() - firstAt;
  const passed = [registered, ...answers.slice(0, 10)];
  const limited = answers.slice(10);

  // The first 11 (1 + burst 10) reached the application: its own statuses, its request id.
  expect(passed.map((a) => a.status)).toEqual([201, 200, 201, 201, 201, 201, 403, 403, 403, 403, 403]);
  expect(passed.every(answeredByService)).toBe(true);
  token = (JSON.parse(passed[1]?.body ?? '{}') as { access_token?: string }).access_token ?? '';
  expect(token).not.toBe('');
  // Then 429, answered by the proxy (the application never answers 429 and always sends X-Request-Id).
  expect(limited.map((a) => a.status)).toEqual([429, 429]);
  expect(limited.some(answeredByService)).toBe(false);
  // The claim only holds if the 12 went out before one slot (6 s) refilled.
  expect(sentFor12Ms).toBeLessThan(60_000 / LIMIT_RPM);

  // The bucket drains one request per 6 s from the first request on: 6 s after it, one slot is free.
  const refillAt = firstAt + 60_000 / LIMIT_RPM + 500;
  await sleep(Math.max(0, refillAt - Date.now()));
  const refillWaitMs = Date.now() - firstAt;
  // The 429'd registration of B created no user: the login reaches the application and is refused.
  const afterRefill = await postForm('/login', { username: userB.email, password }, { fresh: true });
  expect(afterRefill.status).toBe(403);
  expect(answeredByService(afterRefill)).toBe(true);
  // Only one slot refilled.
  const next = await postForm('/login', { username: userB.email, password }, { fresh: true });
  expect(next.status).toBe(429);

  const allLimited = [...limited, next];
  report.rateLimit = {
    passed: passed.length,
    limited: allLimited.length,
    limitedByProxy: allLimited.filter((a) => !answeredByService(a)).length,
    refillWaitMs,
    refillAnswer: afterRefill.status,
  };
  expect(BURST + 1).toBe(passed.length);
}, 60_000);

test('When 60 public and 60 authenticated reads come rapidly, then none gets 429 (case 3)', async () => {
  const requests = Array.from({ length: 120 }, (_, i) =>
    i % 2 === 0
      ? () => send('GET', '/posts/public')
      : () => send('GET', '/posts/?limit=5', { headers: auth() }),
  );
  const answers: Answer[] = [];
  // Ten at a time: rapid, without flooding a shared machine.
  for (let i = 0; i < requests.length; i += 10)
    answers.push(...(await Promise.all(requests.slice(i, i + 10).map((r) => r()))));
  report.general = { sent: answers.length, limited: answers.filter((a) => a.status === 429).length };
  expect(answers.map((a) => a.status).filter((s) => s !== 200)).toEqual([]);
}, 60_000);

test('When variants of /login and /users/ are posted, then each is limited (429), refused (404) or redirected into the limit (case 4)', async () => {
  const variants = ['/Login', '/login/', '/LOGIN', '/users', '/USERS/', '//login', '/%6Cogin'];
  const bypass: { path: string; login: number; register: number }[] = [];
  report.bypass = bypass;
  for (const path of variants) {
    // Use up the counter first (a slot refills every 6 s), so a variant that got past the limiter would show.
    const drained = await pollUntil(
      () => postForm('/login', userA),
      (answer) => answer.status === 429,
      { withinMs: 20_000, everyMs: 0 },
    );
    expect(drained.value.status).toBe(429);
    const login = await postForm(path, userA, { fresh: true });
    const register = await postJson(path, { email: email('bypass'), password }, { fresh: true });
    bypass.push({ path, login: login.status, register: register.status });
    for (const answer of [login, register]) {
      const seen = { path, status: answer.status, answeredByService: answeredByService(answer) };
      // The chart's HTTPRoute redirects /users explicitly: on the Gateway path nothing else will do.
      if (proxy === 'nginx-gateway-fabric' && path === '/users') expect(seen.status).toBe(308);
      if (answer.status === 301 || answer.status === 308) {
        // ingress-nginx: nginx redirects a path that lacks only the trailing slash of a location
        // ending in "/" (here /users -> /users/) with 301 before any limit applies. The Gateway
        // path differs by design: the chart's auth HTTPRoute answers /users with its own 308
        // (RequestRedirect, method kept), also before the limit. Not served either way: the
        // redirect leads into the limited route, where a re-sent POST is counted like any other.
        const location = new URL(answer.headers.location ?? '', 'http://unknown');
        expect({ ...seen, location: location.pathname }).toEqual({
          ...seen,
          status: proxy === 'nginx-gateway-fabric' ? 308 : 301,
          answeredByService: false,
          location: '/users/',
        });
        const followed = await postJson(
          location.pathname,
          { email: email('redirected'), password },
          { fresh: true },
        );
        expect({ path, followed: followed.status }).toEqual({ path, followed: 429 });
      } else if (answer.status === 429) {
        // Limited: the proxy's answer, so the request was counted.
        expect(seen).toEqual({ path, status: 429, answeredByService: false });
      } else {
        // Past the proxy on the general route: the application refuses the path.
        expect(seen).toEqual({ path, status: 404, answeredByService: true });
      }
    }
  }
}, 60_000);

test('When origins of the environment allow-list call, then they get Access-Control-Allow-Origin, and a foreign origin does not (case 5)', async () => {
  expect(allowedOrigins.length).toBeGreaterThan(0);
  const first = allowedOrigins[0] ?? '';
  const foreign = ['https://attacker.example', `${first}.attacker.example`];
  const preflight = (origin: string) =>
    send('OPTIONS', '/posts/', {
      headers: {
        Origin: origin,
        'Access-Control-Request-Method': 'POST',
        'Access-Control-Request-Headers': 'authorization,content-type',
      },
    });
  for (const origin of allowedOrigins) {
    const answer = await preflight(origin);
    expect(answer.status).toBe(200);
    expect(answer.headers['access-control-allow-origin']).toBe(origin);
    expect(answer.headers['access-control-allow-methods']).toContain('POST');
    expect(answer.headers['access-control-allow-headers']).toContain('authorization');
    const call = await send('GET', '/posts/public', { headers: { Origin: origin } });
    expect(call.status).toBe(200);
    expect(call.headers['access-control-allow-origin']).toBe(origin);
  }
  for (const origin of foreign) {
    const answer = await preflight(origin);
    expect(answer.status).toBe(200);
    expect(answer.headers['access-control-allow-origin']).toBeUndefined();
    const call = await send('GET', '/posts/public', { headers: { Origin: origin } });
    expect(call.status).toBe(200);
    expect(call.headers['access-control-allow-origin']).toBeUndefined();
  }
  report.cors = { allowed: allowedOrigins.join(' '), foreign: foreign.join(' ') };
});

platformCase(
  'When the database stops, then ready is 503 while live stays 200 and the API answers 503 problem+json, and all comes back without a restart (case 6)',
  async () => {
    const restartsBefore = await driver.restarts();
    await driver.stopDatabase();

    const readyDown = await readyAnswers(503, probeWindowMs, 250);
    expect(readyDown.value.status).toBe(503);
    // Right away, while the replicas are still endpoints: alive, and the API says 503 in its own words.
    const live = await send('GET', '/healthz/live', { fresh: true });
    expect(live.status).toBe(200);
    const signedIn = await send('GET', '/posts/', { headers: auth(), fresh: true });
    const anonymous = await send('GET', '/posts/public', { fresh: true });
    // The primary is what stops: a release that reads on standbys still answers the anonymous feed
    // there, while every read of the primary is 503.
    if (driver.standby) expect(anonymous.status).toBe(200);
    for (const answer of driver.standby ? [signedIn] : [signedIn, anonymous]) {
      expect(answer.status).toBe(503);
      // Content type, type, status, title and a non-empty detail, as every error of the service.
      expect(problemFaultsOf(answer)).toEqual([]);
    }

    // Over the readiness probe's window, liveness keeps answering 200. Once the failed readiness
    // has taken every replica out of the endpoints, the controller itself answers 503 (an HTML
    // page), which is the ingress, not the service; the operator's view is the restart count.
    const liveDuringOutage: number[] = [];
    const windowEnd = Date.now() + probeWindowMs;
    while (Date.now() < windowEnd) {
      const answer = await send('GET', '/healthz/live', { fresh: true });
      liveDuringOutage.push(answer.status);
      expect(answer.status === 200 || (answer.status === 503 && isProxyPage(answer))).toBe(true);
      await sleep(1000);
    }

    await driver.startDatabase();
    const readyBack = await readyAnswers(200, recoveryMs, 500);
    expect(readyBack.value.status).toBe(200);
    // The emulation reloads nginx for an endpoint change; the ready answer may have come from the new
    // workers while an old one still accepts for a moment. Wait until the change is everywhere.
    await driver.endpointsSettled();
    // The same processes serve again: the token issued before the outage still works. Behind a
    // pooler, requests that reach it inside its server_login_retry window after the database
    // returns may still wait out the statement deadline (503): wait for ten answers in a row.
    const servingBack = await okInARow(10, ['/posts/'], 100);
    expect(servingBack.value).toEqual(new Array<number>(10).fill(200));
    const restarts = await driver.restarts();
    expect(restarts).toBe(restartsBefore);
    report.database = {
      readyDownMs: readyDown.ms,
      readyBackMs: readyBack.ms,
      servingBackMs: servingBack.ms,
      liveDuringOutage: [...new Set([live.status, ...liveDuringOutage])],
      restarts: restarts - restartsBefore,
    };
  },
  300_000,
);

platformCase(
  'When the replicas are replaced under a steady stream of requests, then none of them fails (case 7)',
  async () => {
    // Make sure both replicas are endpoints again after case 6 before the clock starts.
    expect((await send('GET', '/healthz/ready')).status).toBe(200);
    // Case 6 restarted the database just before. A replica that comes back later than the one case 6
    // waited on, or the pooler's first server logins after the restart, can still end a query at its
    // deadline (seen once in CI: two 503s 2.5 s into the rollout, each a server connection not yet
    // logged in). The rollout is measured from a steady state: every endpoint change applied and the
    // stream's own requests answered 200 twenty times in a row, as case 6 asks ten, spread over at
    // least five seconds (the failure above came 5.4 s after the database was back).
    await driver.endpointsSettled();
    const steady = await okInARow(20, ['/posts/public', '/posts/?limit=1'], 250);
    expect(steady.value).toEqual(new Array<number>(20).fill(200));
    const MAX_REQUESTS = 20_000;
    let done = false;
    let detail = '';
    let sent = 0;
    const failures: string[] = [];
    const rollout = driver
      .rollout()
      .then((text) => {
        detail = text.trim().split('\n').slice(-1)[0] ?? '';
      })
      .finally(() => {
        done = true;
      });
    // Two clients, one request at a time each, each on a new connection (see k8s-tests/README.md, Endpoints: nginx reloads).
    const client = async () => {
      while (!done && sent < MAX_REQUESTS) {
        const path = sent % 2 === 0 ? '/posts/public' : '/posts/?limit=1';
        sent++;
        const answer = await send('GET', path, { headers: auth(), fresh: true });
        if (answer.status !== 200) failures.push(`${path}: ${describeAnswer(answer)}`);
      }
    };
    await Promise.all([client(), client(), rollout]);
    // The new replicas serve afterwards.
    for (let i = 0; i < 10; i++) {
      sent++;
      const answer = await send('GET', '/posts/public', { fresh: true });
      if (answer.status !== 200) failures.push(`after the rollout: ${describeAnswer(answer)}`);
    }
    report.rollout = { sent, failed: failures.length, detail };
    expect(failures.slice(0, 10)).toEqual([]);
    expect(sent).toBeGreaterThan(10);
  },
  600_000,
);

/** Seconds within which writes must succeed again after the primary is lost: failover's budget. */
const WRITES_BACK_MS = 15_000;
const failoverCase = driver.failover ? test : test.skip;

failoverCase(
  'When the primary is killed mid-load, then meanwhile only 503s, writes are back within 15 s and every acknowledged write is kept (case 10)',
  async () => {
    const failover = driver.failover;
    if (!failover) throw new Error('the driver has no failover');
    expect((await send('GET', '/healthz/ready')).status).toBe(200);
    const acknowledged: number[] = [];
    const refused: string[] = [];
    let unavailable = 0;
    let fromProxy = 0;
    let sent = 0;
    let killedAt = 0;
    let backAt = 0;
    let stopAt = Number.POSITIVE_INFINITY;
    // Two writers, one request at a time each, each on a new connection, until 2 s after writes are back.
    const writer = async (name: string) => {
      for (let i = 0; Date.now() < stopAt && sent < 20_000; i++) {
        sent++;
        const sentAt = Date.now();
        const answer = await postJson(
          '/posts/',
          { title: `failover ${name} ${i}`, content: `written during the failover case, ${run}` },
          { headers: auth(), fresh: true },
        );
        if (answer.status === 201) {
          acknowledged.push((JSON.parse(answer.body) as { id: number }).id);
          if (killedAt && sentAt >= killedAt && !backAt) {
            backAt = Date.now();
            stopAt = backAt + 2000;
          }
        } else if (answer.status === 503 && isProblem(answer) && answeredByService(answer)) unavailable++;
        // The proxy's own 503 (no ready endpoint) if the replicas' readiness dropped meanwhile.
        else if (answer.status === 503 && isProxyPage(answer)) fromProxy++;
        else refused.push(describeAnswer(answer));
      }
    };
    const writers = Promise.all([writer('a'), writer('b')]);
    while (acknowledged.length < 20) await sleep(50);
    killedAt = Date.now();
    await failover();
    // Bounded: no writes back within a minute ends the case (the expectation below then fails).
    const limit = setTimeout(() => (stopAt = 0), 60_000);
    await writers;
    clearTimeout(limit);

    // Every write the service acknowledged is there to read, on whichever server is primary now.
    const missing: number[] = [];
    for (const id of acknowledged) {
      const answer = await send('GET', `/posts/${id}`, { headers: auth(), fresh: true });
      if (answer.status !== 200) missing.push(id);
    }
    const writesBackMs = backAt ? backAt - killedAt : -1;
    report.failover = {
      sent,
      acknowledged: acknowledged.length,
      missing: missing.length,
      unavailable,
      fromProxy,
      writesBackMs,
    };
    expect(refused).toEqual([]);
    expect(missing).toEqual([]);
    expect(backAt).toBeGreaterThan(0);
    expect(writesBackMs).toBeLessThanOrEqual(WRITES_BACK_MS);
  },
  180_000,
);
