import type { Page, Request, Response } from 'playwright-core';
import { call } from '../../tools/harness/client';
import { servePage, serviceAndBrowser, type PageServer, type RequestLine } from './support';

/**
 * A client of the API as a web front end would be: each step is one fetch from the page's own
 * origin. A step resolves to what the page could read, or to the error when fetch rejected.
 */
const CLIENT_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>Social Posts client</title></head>
<body><h1>Social Posts client</h1>
<script>
async function call(url, init) {
  try {
    const res = await fetch(url, init);
    const text = await res.text();
    return { ok: true, status: res.status, body: text ? JSON.parse(text) : null, requestId: res.headers.get('X-Request-Id') };
  } catch (error) {
    return { ok: false, error: String(error) };
  }
}
window.client = {
  // JSON is not a "simple" content type: the browser sends a preflight first.
  register: (api, email, password) => call(api + '/users/', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ email, password }),
  }),
  // A url-encoded form is a simple request: no preflight, the POST goes straight out.
  login: (api, email, password) => call(api + '/login', {
    method: 'POST', body: new URLSearchParams({ username: email, password }),
  }),
  // Authorization is not a safelisted header: preflight again.
  createPost: (api, token, title) => call(api + '/posts/', {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + token },
    body: JSON.stringify({ title, content: 'posted from another origin' }),
  }),
  readPost: (api, token, id) => call(api + '/posts/' + id, { headers: { Authorization: 'Bearer ' + token } }),
  // A status page reading the probes; its custom header makes the browser send a preflight first.
  probe: (api, path) => call(api + path, { headers: { 'X-Status-Page': '1' } }),
};
</script></body></html>`;

interface StepResult {
  ok: boolean;
  status?: number;
  body?: unknown;
  requestId?: string | null;
  error?: string;
}

let allowed: PageServer;
let listed: PageServer;
/** Every API answer the browser received, to check headers the page itself cannot read. */
const answers: Response[] = [];
/** API requests the browser gave up on (CORS refusals among them). */
const failures: Request[] = [];

beforeAll(async () => {
  allowed = await servePage(CLIENT_PAGE);
  listed = await servePage(CLIENT_PAGE); // served the same way, but its origin is not on the list
});

const { service, browser } = serviceAndBrowser(() => ({ CORS_ALLOWED_ORIGINS: allowed.origin }));

beforeAll(() => {
  browser.context.on('response', (response) => {
    if (response.url().startsWith(service.url)) answers.push(response);
  });
  browser.context.on('requestfailed', (request) => {
    if (request.url().startsWith(service.url)) failures.push(request);
  });
});

afterAll(async () => {
  await allowed.close();
  await listed.close();
});

/** The API answers the browser received for requests sent with this Origin. */
async function answersFrom(origin: string): Promise<Response[]> {
  const origins = await Promise.all(answers.map((answer) => answer.request().headerValue('origin')));
  return answers.filter((_answer, index) => origins[index] === origin);
}

async function openClient(origin: string): Promise<Page> {
  const page = await browser.context.newPage();
  expect((await page.goto(`${origin}/`))?.status()).toBe(200);
  return page;
}

type StepName = 'register' | 'login' | 'createPost' | 'readPost' | 'probe';

/** Runs one of the page's steps in the page, from its origin. */
function step(page: Page, name: StepName, ...args: unknown[]): Promise<StepResult> {
  return page.evaluate(
    ([stepName, stepArgs]) =>
      (
        globalThis as unknown as { client: Record<StepName, (...a: unknown[]) => Promise<StepResult>> }
      ).client[stepName](...stepArgs),
    [name, args] as const,
  );
}

/** Runs a step and returns the request log lines the service wrote for it (preflight included). */
async function stepSeenByServer(
  expectedLines: number,
  run: () => Promise<StepResult>,
): Promise<{ result: StepResult; lines: Omit<RequestLine, 'id'>[] }> {
  const before = service.requests().length;
  const result = await run();
  // Calls this test makes itself, outside the browser, are told apart by their request id.
  const lines = await service.requestsAfter(before, (line) => !line.id.startsWith(DIRECT), expectedLines);
  return { result, lines: lines.map(({ method, path, status }) => ({ method, path, status })) };
}

const DIRECT = 'direct-';
let directCalls = 0;

/** A call from Node, where no CORS applies: what the server really did. */
const direct = (path: string, init: Parameters<typeof call>[2]) =>
  call(service.url, path, { ...init, headers: { 'X-Request-Id': `${DIRECT}${String(++directCalls)}` } });
const directLogin = (username: string, password: string) =>
  direct('/login', { form: { username, password } });

describe('Cross-origin calls in Chromium', () => {
  test('When a page from an allowed origin registers, logs in, posts and reads back, then every call succeeds, with a preflight exactly where CORS requires one', async () => {
    const page = await openClient(allowed.origin);
    const api = service.url;
    const email = 'cross.origin@example.com';
    const password = 'correct horse battery';

    const register = await stepSeenByServer(2, () => step(page, 'register', api, email, password));
    expect(register.result).toMatchObject({ ok: true, status: 201, body: { email } });
    expect(register.lines).toEqual([
      { method: 'OPTIONS', path: '/users/', status: 200 },
      { method: 'POST', path: '/users/', status: 201 },
    ]);

    const login = await stepSeenByServer(1, () => step(page, 'login', api, email, password));
    expect(login.result).toMatchObject({ ok: true, status: 200, body: { token_type: 'bearer' } });
    expect(login.lines).toEqual([{ method: 'POST', path: '/login', status: 200 }]);
    const token = (login.result.body as { access_token: string }).access_token;

    const create = await stepSeenByServer(2, () => step(page, 'createPost', api, token, 'Hello from afar'));
    expect(create.result).toMatchObject({
      ok: true,
      status: 201,
      body: { title: 'Hello from afar', votes: 0 },
    });
    expect(create.lines).toEqual([
      { method: 'OPTIONS', path: '/posts/', status: 200 },
      { method: 'POST', path: '/posts/', status: 201 },
    ]);
    const { id } = create.result.body as { id: number };

    const read = await stepSeenByServer(2, () => step(page, 'readPost', api, token, id));
    expect(read.result).toMatchObject({ ok: true, status: 200, body: { id, title: 'Hello from afar' } });
    expect(read.lines).toEqual([
      { method: 'OPTIONS', path: `/posts/${id}`, status: 200 },
      { method: 'GET', path: `/posts/${id}`, status: 200 },
    ]);
    // Exposed to the page by Access-Control-Expose-Headers.
    expect(read.result.requestId).toMatch(/^[0-9a-f-]{36}$/);

    // The browser saw its own origin echoed (never *) on every answer from the API.
    const fromAllowed = await answersFrom(allowed.origin);
    expect(fromAllowed.length).toBeGreaterThanOrEqual(4);
    for (const answer of fromAllowed) {
      expect(await answer.headerValue('access-control-allow-origin')).toBe(allowed.origin);
    }
    await page.close();
  });

  test('When the same page comes from an origin not on the list, then fetch rejects every call although the server handled them', async () => {
    const page = await openClient(listed.origin);
    const api = service.url;
    const email = 'not.listed@example.com';
    const password = 'correct horse battery';

    // JSON registration: the server answers the preflight, but without Access-Control-Allow-Origin,
    // so the browser rejects and never sends the POST itself.
    const register = await stepSeenByServer(1, () => step(page, 'register', api, email, password));
    expect(register.result.ok).toBe(false);
    expect(register.result.error).toMatch(/TypeError: Failed to fetch/);
    expect(register.lines).toEqual([{ method: 'OPTIONS', path: '/users/', status: 200 }]);
    // Proof from outside the browser: the account did not exist yet.
    expect((await direct('/users/', { json: { email, password } })).status).toBe(201);

    // Form login is a simple request: the server handles it and issues a token, but the browser
    // withholds the answer from the page.
    const login = await stepSeenByServer(1, () => step(page, 'login', api, email, password));
    expect(login.result.ok).toBe(false);
    expect(login.result.error).toMatch(/TypeError: Failed to fetch/);
    expect(login.lines).toEqual([{ method: 'POST', path: '/login', status: 200 }]);

    // Even with a valid token (obtained outside the browser), the preflighted calls get no further.
    const token = ((await directLogin(email, password)).body as { access_token: string }).access_token;
    const create = await stepSeenByServer(1, () => step(page, 'createPost', api, token, 'Never posted'));
    expect(create.result.ok).toBe(false);
    expect(create.lines).toEqual([{ method: 'OPTIONS', path: '/posts/', status: 200 }]);
    const mine = await direct('/posts/?search=Never', { token });
    expect(mine.body).toEqual([]);

    const read = await stepSeenByServer(1, () => step(page, 'readPost', api, token, 1));
    expect(read.result.ok).toBe(false);
    expect(read.lines).toEqual([{ method: 'OPTIONS', path: '/posts/1', status: 200 }]);

    // The browser reported each of the four calls as failed and delivered none of their answers.
    expect(await answersFrom(listed.origin)).toEqual([]);
    const failedHere = failures.filter((failure) => failure.frame().page() === page);
    expect(failedHere.map((failure) => `${failure.method()} ${new URL(failure.url()).pathname}`)).toEqual([
      'POST /users/',
      'POST /login',
      'POST /posts/',
      'GET /posts/1',
    ]);
    await page.close();
  });

  test('When both pages are done, then no cookie was ever set: the browser holds none and no answer carried Set-Cookie', async () => {
    expect(answers.length).toBeGreaterThan(0);
    expect(await browser.context.cookies()).toEqual([]);
    for (const answer of answers) expect(await answer.headerValue('set-cookie')).toBeNull();
    const login = await directLogin('cross.origin@example.com', 'correct horse battery');
    expect(login.status).toBe(200);
    expect(login.headers.get('set-cookie')).toBeNull();
  });

  test('When a status page reads the health probes, then the preflight and the call pass from an allowed origin only', async () => {
    // terminus answers these paths before the app: the service puts the same CORS rules in front.
    const fromAllowed = await openClient(allowed.origin);
    for (const path of ['/healthz/live', '/healthz/ready']) {
      expect(await step(fromAllowed, 'probe', service.url, path)).toMatchObject({
        ok: true,
        status: 200,
        body: { status: 'ok' },
      });
    }
    const fromListed = await openClient(listed.origin);
    const refused = await step(fromListed, 'probe', service.url, '/healthz/ready');
    expect(refused.ok).toBe(false);
    expect(refused.error).toMatch(/TypeError: Failed to fetch/);
    await fromAllowed.close();
    await fromListed.close();
  });
});
