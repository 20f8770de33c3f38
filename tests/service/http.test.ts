import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import request from 'supertest';
import { bearer, expectProblem, newPost, postsFixture } from './helpers';
import { CONTRACT_OPERATIONS } from '../../tools/harness/contract';

const ALLOWED = 'https://app.example.com';
const FOREIGN = 'https://evil.example.net';

const { service: svc, user: account } = postsFixture(['user'], {
  CORS_ALLOWED_ORIGINS: `${ALLOWED}, http://localhost:5173`,
});

const api = () => request(svc.app);

const preflight = (path: string, origin: string, method = 'POST', headers = 'authorization,content-type') =>
  api()
    .options(path)
    .set('Origin', origin)
    .set('Access-Control-Request-Method', method)
    .set('Access-Control-Request-Headers', headers);

describe('Cross-origin requests', () => {
  test.each(['/posts/', '/users/', '/login', '/votes/', '/posts/1', '/no/such/path'])(
    'When an allowed origin sends a preflight to %s, then 200 allows it with every method and the requested headers',
    async (path) => {
      const res = await preflight(path, ALLOWED, 'PUT', 'authorization,content-type,x-custom').expect(200);
      expect(res.headers['access-control-allow-origin']).toBe(ALLOWED);
      expect(res.headers.vary).toMatch(/Origin/);
      const methods = String(res.headers['access-control-allow-methods']).split(',');
      expect(methods).toEqual(expect.arrayContaining(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']));
      expect(res.headers['access-control-allow-headers']).toBe('authorization,content-type,x-custom');
      expect(res.headers['access-control-allow-credentials']).toBeUndefined();
    },
  );

  test('When an allowed origin makes the actual call, then its origin is echoed (never *)', async () => {
    const res = await api().get('/posts/').set(bearer(account)).set('Origin', ALLOWED).expect(200);
    expect(res.headers['access-control-allow-origin']).toBe(ALLOWED);
    expect(res.headers.vary).toMatch(/Origin/);
  });

  test('When an allowed origin reads a list page, then Link is exposed to it with the other headers a client reads', async () => {
    const res = await api().get('/posts/public?limit=1').set('Origin', ALLOWED).expect(200);
    const exposed = String(res.headers['access-control-expose-headers']).split(',');
    expect(exposed).toEqual(['X-Request-Id', 'WWW-Authenticate', 'Retry-After', 'Link']);
  });

  test('When the second listed origin calls, then it is allowed too', async () => {
    const res = await api().get('/posts/public').set('Origin', 'http://localhost:5173');
    expect(res.headers['access-control-allow-origin']).toBe('http://localhost:5173');
  });

  test('When a foreign origin sends a preflight, then 200 but no Access-Control-Allow-Origin', async () => {
    const res = await preflight('/posts/', FOREIGN).expect(200);
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
  });

  test('When a foreign origin makes the actual call, then the server answers without Access-Control-Allow-Origin', async () => {
    const res = await api().get('/posts/').set(bearer(account)).set('Origin', FOREIGN).expect(200);
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
  });

  test('When a call carries no Origin, then it gets Vary: Origin and no Access-Control-* headers', async () => {
    const res = await api().get('/posts/public').expect(200);
    expect(res.headers.vary).toBe('Origin');
    expect(Object.keys(res.headers).filter((name) => name.startsWith('access-control-'))).toEqual([]);
  });

  test('When an origin only resembles an allowed one, then it is foreign', async () => {
    for (const origin of [
      `${ALLOWED}.evil.net`,
      'http://app.example.com',
      'https://APP.example.com',
      'null',
    ]) {
      const res = await preflight('/posts/', origin);
      expect(res.headers['access-control-allow-origin']).toBeUndefined();
    }
  });
});

/** helmet's headers that govern documents; an API answer has no use for them (security-headers.ts). */
const PAGE_ONLY = [
  'cross-origin-opener-policy',
  'origin-agent-cluster',
  'referrer-policy',
  'x-dns-prefetch-control',
  'x-download-options',
  'x-frame-options',
  'x-permitted-cross-domain-policies',
  'x-xss-protection',
];
const API_SET = {
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'cross-origin-resource-policy': 'same-origin',
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
  'x-content-type-options': 'nosniff',
};

describe('Security headers by kind of answer', () => {
  test.each([
    ['a JSON list', () => api().get('/posts/public'), 200],
    ["the caller's list", () => api().get('/posts/').set(bearer(account)), 200],
    ['a 401', () => api().get('/posts/'), 401],
    ['a 404 problem', () => api().get('/no/such/path'), 404],
    ['a 422 problem', () => api().get('/posts/public?limit=0'), 422],
    [
      'a 403 from the login',
      () => api().post('/login').type('form').send({ username: account.email, password: 'wrong-one' }),
      403,
    ],
    ['the OpenAPI document', () => api().get('/openapi.json'), 200],
    ['a preflight', () => preflight('/posts/', ALLOWED), 200],
  ])(
    'When %s is answered, then it carries the API set and none of the page-only headers',
    async (_kind, send, status) => {
      const res = await send();
      expect(res.status).toBe(status);
      expect(res.headers).toMatchObject(API_SET);
      for (const name of PAGE_ONLY) expect(res.headers[name]).toBeUndefined();
    },
  );

  test.each(['/docs', '/docs/', '/docs/swagger-ui.css'])(
    "When the docs page or an asset (%s) is answered, then it carries helmet's full set with its page policy",
    async (path) => {
      const res = await api().get(path).expect(200);
      for (const name of PAGE_ONLY.filter((n) => n !== 'x-xss-protection'))
        expect(res.headers[name]).toBeDefined();
      expect(res.headers['x-xss-protection']).toBe('0');
      // The page runs Swagger UI's own scripts: its policy allows them (the API's allows nothing).
      expect(res.headers['content-security-policy']).toContain("script-src 'self'");
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    },
  );

  test('When a probe answers, then it carries none of them (the kubelet is no browser)', async () => {
    for (const path of ['/healthz/live', '/healthz/ready']) {
      const res = await api().get(path).expect(200);
      for (const name of [...PAGE_ONLY, ...Object.keys(API_SET)]) expect(res.headers[name]).toBeUndefined();
    }
  });
});

describe('Conditional GET', () => {
  test('When a list is asked again with its ETag, then 304 without a body until the list changes', async () => {
    const first = await api().get('/posts/public?limit=3').expect(200);
    const etag = String(first.headers.etag);
    expect(etag).toMatch(/^W\/"[0-9a-f]+-/);

    const again = await api().get('/posts/public?limit=3').set('If-None-Match', etag).expect(304);
    expect(again.text).toBe('');
    expect(again.headers.etag).toBe(etag);

    await newPost(svc.app, account, { title: 'A newer post changes the first page' });
    const changed = await api().get('/posts/public?limit=3').set('If-None-Match', etag).expect(200);
    expect(changed.headers.etag).not.toBe(etag);
    expect((changed.body as { title: string }[])[0]?.title).toBe('A newer post changes the first page');
  });
});

describe('Headers every answer carries or never carries', () => {
  test('When any endpoint answers, then there is no Set-Cookie and no X-Powered-By', async () => {
    const answers = await Promise.all([
      api().post('/login').type('form').send({ username: account.email, password: account.password }),
      api().post('/login').type('form').send({ username: account.email, password: 'wrong-one' }),
      api().get('/posts/').set(bearer(account)),
      api().get('/posts/public'),
      api().get('/docs'),
      api().get('/nowhere'),
      preflight('/users/', ALLOWED),
    ]);
    for (const res of answers) {
      expect(res.headers['set-cookie']).toBeUndefined();
      expect(res.headers['x-powered-by']).toBeUndefined();
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    }
  });
});

describe('Errors', () => {
  test('When the path is unknown, then 404 problem+json', async () => {
    expectProblem(await api().get('/nope'), 404);
    expectProblem(await api().get('/Posts/public'), 404);
  });

  test('When a known path gets an unsupported method, then 405 with Allow', async () => {
    const res = await api().patch('/posts/1').set(bearer(account)).send({});
    expectProblem(res, 405);
    expect(res.headers.allow).toBe('GET, HEAD, PUT, DELETE');
  });

  test.each([
    ['/posts/', 'GET, HEAD, POST'],
    ['/posts/public', 'GET, HEAD'],
    ['/posts/1', 'GET, HEAD, PUT, DELETE'],
  ])('When %s answers 405, then its Allow names HEAD, which it serves', async (path, allow) => {
    const res = await api().patch(path).set(bearer(account)).send({});
    expectProblem(res, 405);
    expect(res.headers.allow).toBe(allow);
    expect((await api().head(path).set(bearer(account))).status).not.toBe(405);
  });

  test('When a path under /docs ends in package.json, then the usual 404 problem+json', async () => {
    expectProblem(await api().get('/docs/package.json'), 404);
    expectProblem(await api().post('/docs/../x/package.json'), 404);
  });

  test('When the path is badly percent-encoded, then 400', async () => {
    expectProblem(await api().get('/posts/%E0%A4%A').set(bearer(account)), 400);
  });

  test('When a body is deeply nested JSON, then a clear 4xx and the process carries on', async () => {
    const deep = `${'['.repeat(50_000)}${']'.repeat(50_000)}`;
    const res = await api()
      .post('/posts/')
      .set(bearer(account))
      .set('Content-Type', 'application/json')
      .send(deep);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    await api().get('/posts/public').expect(200);
  });
});

describe('Documentation', () => {
  /** /openapi.json, in the parts these cases read. */
  const openApiDocument = async () =>
    (await api().get('/openapi.json').expect(200)).body as {
      openapi: string;
      info: { version: string };
      paths: Record<string, Record<string, { responses?: Record<string, unknown>; security?: unknown[] }>>;
      components: {
        securitySchemes: Record<string, { type: string; flows?: { password?: { tokenUrl: string } } }>;
      };
    };

  test('When /docs is opened, then 200 with Swagger UI whose assets load', async () => {
    const res = await api().get('/docs').expect(200);
    expect(res.headers['content-type']).toMatch(/text\/html/);
    expect(res.text).toContain('swagger-ui');
    for (const asset of ['/docs/swagger-ui.css', '/docs/swagger-ui-bundle.js', '/docs/swagger-ui-init.js']) {
      expect(res.text).toContain(asset);
      expect((await api().get(asset)).status).toBe(200);
    }
    const init = await api().get('/docs/swagger-ui-init.js');
    expect(init.text).toContain('"tokenUrl": "/login"');
  });

  test('When /openapi.json is read, then it documents every operation of the contract with a password flow at /login', async () => {
    const doc = await openApiDocument();
    expect(doc.openapi).toMatch(/^3\./);
    const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item)
        .filter((k) => k !== 'parameters')
        .map((method) => `${method.toUpperCase()} ${path}`),
    );
    expect(operations.sort()).toEqual([...CONTRACT_OPERATIONS].sort());
    expect(doc.components.securitySchemes.oauth2Password?.flows?.password?.tokenUrl).toBe('/login');
    expect(doc.components.securitySchemes.bearerAuth?.type).toBe('http');
    expect(Object.keys(doc.paths['/posts/{id}']?.put?.responses ?? {})).toEqual(
      expect.arrayContaining(['200', '401', '403', '404', '422']),
    );
    expect(doc.paths['/posts/']?.get?.security).toBeDefined();
  });

  test("When /openapi.json is read, then its version is the release's, package.json's", async () => {
    const { version } = JSON.parse(readFileSync(resolve(__dirname, '../../package.json'), 'utf8')) as {
      version: string;
    };
    const doc = await openApiDocument();
    expect(doc.info.version).toBe(version);
    expect(version).toMatch(/^\d+\.\d+\.\d+$/);
  });

  test("When docs/api.md's status table is read, then each call lists exactly the statuses /openapi.json gives it", async () => {
    const doc = await openApiDocument();
    const table = readFileSync(resolve(__dirname, '../../docs/api.md'), 'utf8')
      .split('\n')
      .filter((line) => /^\| `(GET|POST|PUT|DELETE)/.test(line));
    const documented = new Map<string, string[]>();
    for (const line of table) {
      const [call = '', success = '', errors = ''] = line.split(' | ');
      // `GET`/`HEAD /healthz/live`, `/healthz/ready` names two paths; the others one (`/posts` is an alias).
      const method = /^\| `(GET|POST|PUT|DELETE)/.exec(call)?.[1] ?? '';
      const paths = call.startsWith('| `GET`/`HEAD')
        ? [...call.matchAll(/(\/healthz\/\w+)/g)].map((m) => m[1] ?? '')
        : [/^\| `\w+ (\S+)`/.exec(call)?.[1] ?? ''];
      const statuses = [...`${success} ${errors}`.matchAll(/\b([1-5]\d\d)\b/g)].map((m) => m[1] ?? '');
      for (const path of paths) documented.set(`${method} ${path}`, [...new Set(statuses)].sort());
    }
    const openapi = new Map<string, string[]>();
    for (const [path, item] of Object.entries(doc.paths))
      for (const [method, operation] of Object.entries(item))
        if (operation.responses)
          openapi.set(`${method.toUpperCase()} ${path}`, Object.keys(operation.responses).sort());
    // The probes' row lists what either probe answers.
    const probes = [
      ...new Set([...(openapi.get('GET /healthz/live') ?? []), ...(openapi.get('GET /healthz/ready') ?? [])]),
    ].sort();
    openapi.set('GET /healthz/live', probes);
    openapi.set('GET /healthz/ready', probes);
    expect(Object.fromEntries(documented)).toEqual(Object.fromEntries(openapi));
  });
});
