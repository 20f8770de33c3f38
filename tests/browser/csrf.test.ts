import { account, ACCOUNT_PASSWORD, call } from '../../tools/harness/client';
import { servePage, serviceAndBrowser, type PageServer } from './support';

/**
 * Cross-site request forgery, as a browser really sends it: a page on a foreign origin submits
 * forms to the API by itself the moment it loads. The service's stance (docs/security.md, CSRF): the
 * credential is the Authorization header, which no form can set and no cookie carries; JSON
 * endpoints refuse the content types a form can send; /login answers the token in a body a foreign
 * page cannot read.
 */

const PASSWORD = ACCOUNT_PASSWORD;
const VICTIM = 'victim@example.com';
const ATTACKER = 'attacker@example.com';

/** The attacker's page: four forms, each into an iframe of its own, submitted on load. */
const attackerPage = (api: string) => `<!doctype html>
<html><head><meta charset="utf-8"><title>Win a prize</title></head><body>
<form id="login" action="${api}/login" method="POST" target="f-login">
  <input name="username" value="${ATTACKER}"><input name="password" value="${PASSWORD}">
</form>
<form id="post-text" action="${api}/posts/" method="POST" target="f-post-text" enctype="text/plain">
  <input name='{"title":"forged","content":"x","pad":"' value='"}'>
</form>
<form id="post-multipart" action="${api}/posts/" method="POST" target="f-post-multipart" enctype="multipart/form-data">
  <input name="title" value="forged"><input name="content" value="x">
</form>
<form id="vote-text" action="${api}/votes/" method="POST" target="f-vote-text" enctype="text/plain">
  <input name='{"post_id":1,"dir":1,"pad":"' value='"}'>
</form>
<script>
window.seen = {};
const ids = ['login', 'post-text', 'post-multipart', 'vote-text'];
for (const id of ids) {
  const frame = document.createElement('iframe');
  frame.name = 'f-' + id;
  frame.addEventListener('load', () => {
    if (!frame.dataset.submitted) return;
    // What the attacker's script can read of the answer: nothing, if the browser holds the line.
    try {
      window.seen[id] = { read: String(frame.contentWindow.document.body.innerText) };
    } catch (error) {
      window.seen[id] = { blocked: error.name };
    }
  });
  document.body.appendChild(frame);
}
window.addEventListener('load', async () => {
  for (const id of ids) {
    document.querySelector('iframe[name="f-' + id + '"]').dataset.submitted = '1';
    document.getElementById(id).submit();
  }
  // And by script: a readable (cors) call is refused for want of Access-Control-Allow-Origin; a
  // no-cors one is refused too (Cross-Origin-Resource-Policy: same-origin, on every API answer).
  const form = new URLSearchParams({ username: '${ATTACKER}', password: '${PASSWORD}' });
  try {
    const res = await fetch('${api}/login', { method: 'POST', body: form });
    window.fetchCors = { read: await res.text() };
  } catch (error) {
    window.fetchCors = { blocked: String(error) };
  }
  try {
    const opaque = await fetch('${api}/login', { method: 'POST', body: form, mode: 'no-cors' });
    window.fetchNoCors = { type: opaque.type, status: opaque.status, body: await opaque.text() };
  } catch (error) {
    window.fetchNoCors = { blocked: String(error) };
  }
});
</script></body></html>`;

/** The page's localStorage, as far as this test uses it (no DOM types here). */
interface WebStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

// No origin is allowed cross-origin calls: the attacker's origin is as foreign as any.
const { service, browser } = serviceAndBrowser(() => ({ CORS_ALLOWED_ORIGINS: '' }));
let attacker: PageServer;
let victimToken: string;

/** The victim's own posts, as the API lists them to it. */
const victimsPosts = async () => (await call(service.url, '/posts/', { token: victimToken })).body;

beforeAll(async () => {
  victimToken = await account(service.url, VICTIM);
  await account(service.url, ATTACKER);
  attacker = await servePage(attackerPage(service.url));
});

afterAll(async () => {
  await attacker.close();
});

test('When a foreign page auto-submits forms to /login, /posts/ and /votes/, then nothing is created, no cookie is set and the attacker reads nothing', async () => {
  // The victim uses the API from its own origin: the token is in that origin's storage, as in /docs.
  const victim = await browser.context.newPage();
  await victim.goto(`${service.url}/openapi.json`);
  await victim.evaluate((token) => {
    (globalThis as unknown as { localStorage: WebStorage }).localStorage.setItem('authorized', token);
  }, victimToken);
  const postsBefore = await victimsPosts();

  const before = service.requests().length;
  const page = await browser.context.newPage();
  await page.goto(`${attacker.origin}/`);
  await page.waitForFunction(
    () => {
      const w = globalThis as unknown as { seen: Record<string, unknown>; fetchNoCors?: unknown };
      return Object.keys(w.seen).length === 4 && w.fetchNoCors !== undefined;
    },
    undefined,
    { timeout: 30_000 },
  );
  const { seen, fetchCors, fetchNoCors } = await page.evaluate(() => {
    const w = globalThis as unknown as { seen: unknown; fetchCors: unknown; fetchNoCors: unknown };
    return { seen: w.seen, fetchCors: w.fetchCors, fetchNoCors: w.fetchNoCors };
  });

  // The forms did reach the service: the browser sent them, and the service refused what it had to.
  const lines = await service.requestsAfter(before, (line) => line.method === 'POST', 6);
  const statuses = lines.map(({ path, status }) => `${path} ${String(status)}`).sort();
  expect(statuses).toEqual([
    '/login 200',
    '/login 200',
    '/login 200',
    '/posts/ 401',
    '/posts/ 401',
    '/votes/ 401',
  ]);

  // No trace the attacker can use: its script read none of the answers, the token included...
  for (const id of ['login', 'post-text', 'post-multipart', 'vote-text'])
    expect((seen as Record<string, { blocked?: string }>)[id]?.blocked).toBe('SecurityError');
  expect((fetchCors as { blocked?: string }).blocked).toMatch(/Failed to fetch/);
  expect((fetchNoCors as { blocked?: string }).blocked).toMatch(/Failed to fetch/);
  // ...no cookie came with any answer, so the browser holds no session for the API, the
  // attacker's or the victim's...
  expect(await browser.context.cookies(service.url)).toEqual([]);
  // ...the victim's stored token is untouched, and nothing was written in the victim's name.
  expect(
    await victim.evaluate(() =>
      (globalThis as unknown as { localStorage: WebStorage }).localStorage.getItem('authorized'),
    ),
  ).toBe(victimToken);
  expect(await victimsPosts()).toEqual(postsBefore);
  const votes = await call(service.url, '/votes/', { token: victimToken, json: { post_id: 1, dir: 0 } });
  // Withdrawing a vote the victim never cast: 404 means the forged vote did not land.
  expect(votes.status).toBe(404);
});
