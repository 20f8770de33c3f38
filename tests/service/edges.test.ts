import { gzipSync } from 'node:zlib';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { keyId } from '../../service/src/settings';
import {
  bearer,
  databaseSnapshot,
  expectProblem,
  newAccount,
  newPost,
  postsFixture,
  signToken,
  startTestService,
  TEST_SECRET,
  uniqueEmail,
} from './helpers';

/**
 * The smaller edges an attack round found: ids and paging numbers written other than as plain
 * decimal integers, JSON and form bodies that are not UTF-8, the stock Swagger UI files, and tokens that
 * do not name the release they are from.
 */

const { service, owner } = postsFixture(['owner']);
const app = () => service.app;

describe('Integers in paths and queries', () => {
  const everyMethod = (written: string) => [
    request(app()).get(`/posts/${written}`),
    request(app()).put(`/posts/${written}`).send({ title: 't', content: 'c' }),
    request(app()).delete(`/posts/${written}`),
  ];

  test.each(['1e0', '01', '+1', '%201', '1%20', '1.0', '1.5', '0x1', '00', '-0', 'abc'])(
    'When a post is addressed as /posts/%s, then 422 naming id, for every method, and nothing changes',
    async (written) => {
      const post = await newPost(app(), owner);
      expect(post.id).toBeGreaterThan(0);
      // The post exists as 1 or later; each spelling below would have reached id 1 before.
      const before = await databaseSnapshot(service.db);
      for (const call of everyMethod(written)) {
        const problem = expectProblem(await call.set(bearer(owner)), 422);
        expect(problem.errors).toEqual([expect.objectContaining({ field: 'id' })]);
      }
      expect(await databaseSnapshot(service.db)).toBe(before);
    },
  );

  test.each(['0', '-1', '2147483648', '99999999999999999999', `1${'0'.repeat(309)}`])(
    'When a post is addressed as /posts/%s, a plain decimal integer no post can have, then 404 naming it for every method, as for any missing post, and nothing changes',
    async (written) => {
      await newPost(app(), owner);
      const before = await databaseSnapshot(service.db);
      for (const call of everyMethod(written)) {
        const problem = expectProblem(await call.set(bearer(owner)), 404);
        expect(problem.detail).toBe(`post with id: ${written} was not found`);
      }
      expect(await databaseSnapshot(service.db)).toBe(before);
    },
  );

  test('When the id is the plain decimal form, then the post answers, up to the largest integer', async () => {
    const post = await newPost(app(), owner);
    await request(app()).get(`/posts/${post.id}`).set(bearer(owner)).expect(200);
    expectProblem(await request(app()).get('/posts/2147483647').set(bearer(owner)), 404);
  });

  test.each([
    ['limit', '1e1'],
    ['limit', '010'],
    ['limit', '+5'],
    ['limit', ' 5'],
    ['limit', '5.0'],
    ['skip', '+1'],
    ['skip', '00'],
    ['skip', '1e0'],
  ])('When %s=%s is sent, then 422 naming it', async (field, value) => {
    for (const path of ['/posts/public', '/posts/']) {
      const res = await request(app())
        .get(path)
        .query(`${field}=${encodeURIComponent(value)}`)
        .set(bearer(owner));
      const problem = expectProblem(res, 422);
      expect(problem.errors).toEqual([expect.objectContaining({ field })]);
    }
  });

  test('When limit and skip are plain decimals (0 included), then the page answers', async () => {
    await request(app()).get('/posts/public?limit=10&skip=0').expect(200);
    // A negative one keeps its range message.
    const problem = expectProblem(await request(app()).get('/posts/public?skip=-1'), 422);
    expect(problem.detail).toMatch(/greater than or equal to 0/);
  });
});

/** A request whose body is these bytes as they are (supertest would write a Buffer as JSON). */
const postBytes = (path: string, bytes: Buffer) =>
  request(app())
    .post(path)
    .set('Content-Type', 'application/json')
    .serialize(() => bytes as unknown as string)
    .send({});

describe('Bodies that are not UTF-8', () => {
  const invalid = [
    ['a lone continuation byte', Buffer.from([0x80])],
    ['a truncated two-byte sequence', Buffer.from([0xc3])],
    ['an overlong encoding of /', Buffer.from([0xc0, 0xaf])],
    ['an encoded surrogate', Buffer.from([0xed, 0xa0, 0x80])],
    ['Latin-1 é', Buffer.from([0xe9])],
  ] as const;

  test.each(invalid)('When a post title holds %s, then 400 and nothing is stored', async (_name, bytes) => {
    const before = await databaseSnapshot(service.db);
    const body = Buffer.concat([Buffer.from('{"title":"bad '), bytes, Buffer.from('","content":"c"}')]);
    const res = await postBytes('/posts/', body).set(bearer(owner));
    expect(expectProblem(res, 400).detail).toBe('The request body is not valid UTF-8');
    expect(await databaseSnapshot(service.db)).toBe(before);
  });

  test('When the body is gzip of invalid UTF-8, then 400 too: the check reads the decoded bytes', async () => {
    const before = await databaseSnapshot(service.db);
    const bytes = Buffer.concat([
      Buffer.from('{"email":"x'),
      Buffer.from([0xff]),
      Buffer.from('@example.com","password":"correct horse battery"}'),
    ]);
    const res = await postBytes('/users/', gzipSync(bytes)).set('Content-Encoding', 'gzip');
    expect(expectProblem(res, 400).detail).toBe('The request body is not valid UTF-8');
    expect(await databaseSnapshot(service.db)).toBe(before);
  });

  test('When a login form holds an invalid byte, then 400: it is not read as the password U+FFFD stands for', async () => {
    const email = uniqueEmail('latin1');
    await request(app())
      .post('/users/')
      .send({ email, password: '\ufffd'.repeat(8) })
      .expect(201);
    const body = Buffer.concat([
      Buffer.from(`username=${encodeURIComponent(email)}&password=`),
      Buffer.alloc(8, 0xff),
    ]);
    const res = await request(app())
      .post('/login')
      .set('Content-Type', 'application/x-www-form-urlencoded')
      .serialize(() => body as unknown as string)
      .send({});
    expect(expectProblem(res, 400).detail).toBe('The request body is not valid UTF-8');
  });

  test('When the body is valid UTF-8 beyond ASCII, then it is stored as sent', async () => {
    const title = 'Été 🌞 naïve – ok';
    const post = await newPost(app(), owner, { title });
    expect(post.title).toBe(title);
  });
});

describe('Documentation files', () => {
  test.each([
    '/docs/index.html',
    '/docs/swagger-initializer.js',
    '/docs/oauth2-redirect.html',
    '/docs/swagger-ui-bundle.js.map',
    '/docs/swagger-ui-es-bundle.js',
    '/docs/LICENSE',
    '/docs/package.json',
  ])('When %s is asked for, then the usual 404 problem', async (path) => {
    expectProblem(await request(app()).get(path), 404);
  });

  test('When the page is read, then every file it links to under /docs answers 200', async () => {
    const page = (await request(app()).get('/docs').expect(200)).text;
    const linked = [...page.matchAll(/(?:href|src)="(\/docs\/[^"]+)"/g)].map((match) => match[1] ?? '');
    expect(linked).toEqual(
      expect.arrayContaining([
        '/docs/swagger-ui.css',
        '/docs/swagger-ui-bundle.js',
        '/docs/swagger-ui-init.js',
      ]),
    );
    for (const path of linked) await request(app()).get(path).expect(200);
  });
});

describe('Token issuer and audience', () => {
  const secondsNow = () => Math.floor(Date.now() / 1000);
  const sign = (claims: Record<string, unknown>) =>
    signToken({ sub: String(owner.user.id), ...claims }, { keyid: keyId(TEST_SECRET) });

  test('When a user logs in, then the token carries iss and aud, both the release issuer', () => {
    const claims = jwt.decode(owner.token) as Record<string, unknown>;
    expect(claims).toMatchObject({ iss: 'social-posts', aud: 'social-posts' });
  });

  test.each([
    ['another issuer and audience', { iss: 'other', aud: 'other' }],
    ['the right issuer, another audience', { iss: 'social-posts', aud: 'other' }],
    ['another issuer, the right audience', { iss: 'other', aud: 'social-posts' }],
    ['only iss', { iss: 'social-posts' }],
    ['only aud', { aud: 'social-posts' }],
    ['an audience list', { iss: 'social-posts', aud: ['social-posts'] }],
  ])('When a token signed with the shared key has %s, then 401', async (_name, claims) => {
    expectProblem(
      await request(app())
        .get('/posts/')
        .set(bearer(sign(claims))),
      401,
    );
  });

  test('When a token names this issuer and audience, then it is accepted', async () => {
    await request(app())
      .get('/posts/')
      .set(bearer(sign({ iss: 'social-posts', aud: 'social-posts' })))
      .expect(200);
  });

  describe('Two releases sharing one signing key', () => {
    const { service: blue } = postsFixture([], { TOKEN_ISSUER: 'blue.prod' });
    const { service: green } = postsFixture([], { TOKEN_ISSUER: 'green.prod' });

    test('When a user of one logs in, then the other refuses the token, and its own accepts it', async () => {
      // The same account on both: the refusal is the issuer's, not an unknown user's.
      const account = await newAccount(blue.app, 'shared@example.com');
      await request(green.app)
        .post('/users/')
        .send({ email: account.email, password: account.password })
        .expect(201);
      await request(blue.app).get('/posts/').set(bearer(account)).expect(200);
      expectProblem(await request(green.app).get('/posts/').set(bearer(account)), 401);
    });
  });

  describe('Tokens signed before tokens named their issuer', () => {
    /** Only Date is faked: the window is measured against it, and everything else runs as usual. */
    const REAL_TIMERS = [
      'hrtime',
      'nextTick',
      'performance',
      'queueMicrotask',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ] as const;

    afterEach(() => {
      jest.useRealTimers();
    });

    test('When one arrives within a token lifetime of the start, then it is accepted; after it, 401, while named ones still pass', async () => {
      // A one-minute lifetime: the window closes one minute after the app was built.
      const short = await startTestService({ ACCESS_TOKEN_EXPIRE_MINUTES: '1' });
      try {
        const email = 'legacy@example.com';
        const created = await request(short.app)
          .post('/users/')
          .send({ email, password: 'correct horse battery' })
          .expect(201);
        const sub = String((created.body as { id: number }).id);
        const signed = (claims: Record<string, unknown> = {}) =>
          signToken(
            { sub, iat: secondsNow(), exp: secondsNow() + 60, ...claims },
            { keyid: keyId(TEST_SECRET) },
          );
        // Stamped a little ahead (within the clock skew allowed), so it outlives the window.
        const early = signed({ iat: secondsNow() + 25, exp: secondsNow() + 85 });
        await request(short.app).get('/posts/').set(bearer(early)).expect(200);
        // The window is fixed when the process starts; the clock is moved past it, not waited for.
        jest.useFakeTimers({ doNotFake: [...REAL_TIMERS] });
        jest.setSystemTime(Date.now() + 61_000);
        expectProblem(await request(short.app).get('/posts/').set(bearer(signed())), 401);
        // Not kept by the token cache: the window, not its exp, ends it.
        expectProblem(await request(short.app).get('/posts/').set(bearer(early)), 401);
        await request(short.app)
          .get('/posts/')
          .set(bearer(signed({ iss: 'social-posts', aud: 'social-posts' })))
          .expect(200);
      } finally {
        jest.useRealTimers();
        await short.close();
      }
    });
  });
});
