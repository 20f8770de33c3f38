import type { Page } from 'playwright-core';
import { artifactPath, serviceAndBrowser } from './support';
import { account, call } from '../../tools/harness/client';
import { CONTRACT_OPERATIONS } from '../../tools/harness/contract';

const SCREENSHOT = 'docs-try-it-out.png';
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

const { service, browser } = serviceAndBrowser();

/** Every operation of the OpenAPI document, as Swagger UI labels it: "GET /posts/{id}". */
async function documentedOperations(): Promise<string[]> {
  const document = (await (await fetch(`${service.url}/openapi.json`)).json()) as {
    paths: Record<string, Record<string, unknown>>;
  };
  return Object.entries(document.paths)
    .flatMap(([path, item]) =>
      Object.keys(item)
        // A path item also holds shared `parameters`; only HTTP methods are operations.
        .filter((key) => HTTP_METHODS.includes(key))
        .map((method) => `${method.toUpperCase()} ${path}`),
    )
    .sort();
}

async function shownOperations(page: Page): Promise<string[]> {
  const blocks = page.locator('.opblock .opblock-summary');
  const shown: string[] = [];
  for (const block of await blocks.all()) {
    const method = (await block.locator('.opblock-summary-method').innerText()).trim();
    const path = await block.locator('.opblock-summary-path').getAttribute('data-path');
    shown.push(`${method} ${path ?? '?'}`);
  }
  return shown.sort();
}

type Credentials = { email: string; password: string };

/** Someone has posted already, so the list has something to show: two posts; the poster's token. */
async function postedBefore(credentials: Credentials): Promise<string> {
  const token = await account(service.url, credentials.email, credentials.password);
  for (const title of ['First post seen in the docs', 'Second post seen in the docs']) {
    const created = await call(service.url, '/posts/', {
      token,
      json: { title, content: 'Written before the browser came' },
    });
    expect(created.status).toBe(201);
  }
  return token;
}

/** Authorize: the OAuth2 password flow posts the e-mail and password as a form to /login. */
async function authorize(page: Page, credentials: Credentials): Promise<void> {
  await page.locator('.auth-wrapper button.authorize').click();
  const modal = page.locator('.modal-ux');
  await modal.waitFor();
  // The login the README describes is the first thing the dialog shows.
  await expect(modal.locator('.auth-container').first().innerText()).resolves.toContain('oauth2Password');
  const oauth = modal.locator('.auth-container', { hasText: 'oauth2Password' });
  await oauth.locator('#oauth_username').fill(credentials.email);
  await oauth.locator('#oauth_password').fill(credentials.password);
  const loginRequest = page.waitForRequest((req) => req.url() === `${service.url}/login`);
  const loginResponse = page.waitForResponse((res) => res.url() === `${service.url}/login`);
  await oauth.locator('button.authorize').click();
  const sent = await loginRequest;
  expect(sent.method()).toBe('POST');
  expect(await sent.headerValue('content-type')).toMatch(/^application\/x-www-form-urlencoded/);
  const form = new URLSearchParams(sent.postData() ?? '');
  expect(form.get('grant_type')).toBe('password');
  expect(form.get('username')).toBe(credentials.email);
  expect((await loginResponse).status()).toBe(200);
  // Once authorized, Swagger UI shows "Authorized" and a Logout button in that section.
  await oauth.locator('h6', { hasText: 'Authorized' }).waitFor();
  await oauth.getByRole('button', { name: 'Remove authorization' }).waitFor();
  await modal.locator('button.btn-done, button.close-modal').first().click();
  await modal.waitFor({ state: 'detached' });
}

describe('The /docs page in Chromium', () => {
  test('When a person opens /docs, authorizes with e-mail and password and tries GET /posts/, then Swagger UI shows 200 with the posts', async () => {
    const credentials = { email: 'reader@example.com', password: 'correct horse battery' };
    const token = await postedBefore(credentials);

    const page = await browser.context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    const response = await page.goto(`${service.url}/docs`);
    expect(response?.status()).toBe(200);

    // Every operation of the document is listed.
    await page.locator('.opblock').first().waitFor();
    const expected = await documentedOperations();
    // The specification's endpoint table, /docs and /openapi.json aside.
    expect(expected).toEqual(expect.arrayContaining([...CONTRACT_OPERATIONS]));
    expect(await shownOperations(page)).toEqual(expected);

    await authorize(page, credentials);

    // Try it out on GET /posts/.
    const operation = page.locator('.opblock.opblock-get', {
      has: page.locator('.opblock-summary-path[data-path="/posts/"]'),
    });
    await operation.locator('.opblock-summary').click();
    await operation.locator('button.try-out__btn').click();
    const listRequest = page.waitForRequest(
      (req) => req.method() === 'GET' && req.url().startsWith(`${service.url}/posts/?`),
    );
    await operation.locator('button.execute').click();
    expect(await (await listRequest).headerValue('authorization')).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);

    const live = operation.locator('.live-responses-table');
    await live.locator('.response-col_status').first().waitFor();
    expect((await live.locator('.response .response-col_status').first().innerText()).trim()).toBe('200');
    const body = await live.locator('.response-col_description pre').first().innerText();
    expect(body).toContain('First post seen in the docs');
    expect(body).toContain('Second post seen in the docs');

    await live.scrollIntoViewIfNeeded();
    await operation.screenshot({ path: artifactPath(SCREENSHOT) });

    // Nothing is pre-filled that a pasted cursor would clash with: skip stays empty, and the
    // next page's cursor (from the Link header) pasted into its field is answered 200.
    const field = (name: string) => operation.locator(`tr[data-param-name="${name}"] input`);
    expect(await field('skip').inputValue()).toBe('');
    const first = await call(service.url, '/posts/?limit=1', { token });
    const cursor = /[?&]cursor=([^&>]+)/.exec(first.headers.get('link') ?? '')?.[1];
    expect(cursor).toBeDefined();
    await field('limit').fill('1');
    await field('cursor').fill(decodeURIComponent(cursor ?? ''));
    const nextRequest = page.waitForRequest((req) => req.method() === 'GET' && req.url().includes('cursor='));
    const nextResponse = page.waitForResponse((res) => res.url().includes('cursor='));
    await operation.locator('button.execute').click();
    expect(new URL((await nextRequest).url()).searchParams.has('skip')).toBe(false);
    expect((await nextResponse).status()).toBe(200);
    await expect(live.locator('.response-col_description pre').first().innerText()).resolves.toContain(
      'First post seen in the docs',
    );

    expect(pageErrors).toEqual([]);
    // The token lives in the page, never in a cookie.
    expect(await browser.context.cookies()).toEqual([]);
  });
});
