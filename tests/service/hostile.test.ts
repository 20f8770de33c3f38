import zlib from 'node:zlib';
import iconv from 'iconv-lite';
import request from 'supertest';
import {
  bearer,
  databaseSnapshot,
  expectProblem,
  logIn,
  newAccount,
  newPost,
  serverFixture,
  uniqueEmail,
  type Account,
} from './helpers';
import { call } from '../../tools/harness/client';
import { handSignedToken, rawExchange } from '../../tools/harness/hostile';
import { countOf } from '../../tools/harness/postgres';
import { parsedBody, problemFaults } from '../../tools/harness/problem';

/**
 * The families of hostile input an independent attack run found, over real HTTP on the
 * server as it runs in production (startServer: terminus, Node's HTTP layer, the app). Raw sockets
 * where no HTTP client would send the request.
 */

const server = serverFixture();
let owner: Account;
const PASSWORD = 'correct horse battery';

beforeAll(async () => {
  owner = await newAccount(server.base, uniqueEmail('owner'));
});

const api = () => request(server.base);
/** A registration as a client sends it, with the file's one password. */
const register = (email: string) => api().post('/users/').send({ email, password: PASSWORD });
const auth = () => bearer(owner);

/** Every row of every table, so a refused request can be shown to have changed nothing. */
const snapshot = (): Promise<string> => databaseSnapshot(server.db);

/**
 * Writes raw bytes, then collects the answer until the server closes or `waitMs` passes. A reset
 * after a refusal (the server closing on a body it did not read) ends the answer, not the case.
 */
const raw = (bytes: string, waitMs = 3000) =>
  rawExchange(server.running.port, bytes, { waitMs, encoding: 'utf8', ignoreErrors: true });

/** The status and parsed problem body of a raw answer that must be problem+json. */
function rawProblem(answer: { text: string }): { status: number; detail: string; headers: string } {
  const [head = '', body = ''] = answer.text.split('\r\n\r\n', 2);
  const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1]);
  const contentType = /\r\ncontent-type: ([^\r]*)/i.exec(head)?.[1];
  const parsed = parsedBody(body);
  expect(problemFaults({ status, contentType, body: parsed })).toEqual([]);
  return { status, detail: (parsed as { detail: string }).detail, headers: head };
}

/**
 * A POST of exact bytes (supertest would serialise a Buffer as JSON), read back in the shape
 * expectProblem takes.
 */
async function postBytes(path: string, headers: Record<string, string>, body: Buffer) {
  const answer = await call(server.base, path, { method: 'POST', headers, body });
  return { ...answer, headers: { 'content-type': answer.contentType } } as unknown as request.Response;
}

/** A POST of JSON `body` in Content-Encoding `coding`, with `headers` besides. */
const postEncoded = (path: string, coding: string, body: Buffer, headers: Record<string, string> = {}) =>
  postBytes(path, { ...headers, 'Content-Type': 'application/json', 'Content-Encoding': coding }, body);

const registration = () => JSON.stringify({ email: uniqueEmail('enc'), password: PASSWORD });

/** A raw POST /users/ of a new registration, with `Expect: expectation` when given, after `hosts`. */
function rawRegistration(expectation?: string, hosts = 'Host: x\r\n') {
  const body = registration();
  const expectLine = expectation === undefined ? '' : `Expect: ${expectation}\r\n`;
  return raw(
    `POST /users/ HTTP/1.1\r\n${hosts}Connection: close\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n${expectLine}\r\n${body}`,
  );
}

describe('1. Content-Encoding on every body', () => {
  const corrupt: [string, string, Buffer][] = [
    ['gzip on data that is not gzip', 'gzip', Buffer.from(registration())],
    ['deflate on data that is not deflate', 'deflate', Buffer.from(registration())],
    ['br on data that is not brotli', 'br', Buffer.from(registration())],
    ['a truncated gzip stream', 'gzip', zlib.gzipSync(registration()).subarray(0, 20)],
    ['a truncated deflate stream', 'deflate', zlib.deflateSync(registration()).subarray(0, 8)],
  ];
  test.each(corrupt)(
    'When /users/ gets %s, then 400 problem+json saying it could not be decoded, and nothing is stored',
    async (_name, coding, body) => {
      const before = await snapshot();
      const res = await postEncoded('/users/', coding, body);
      expect(expectProblem(res, 400).detail).toBe(`The request body could not be decoded as ${coding}`);
      expect(await snapshot()).toBe(before);
    },
  );

  test('When /login, /posts/ and /votes/ get a corrupt gzip body, then 400 each, never 500', async () => {
    const before = await snapshot();
    const login = await postBytes(
      '/login',
      { 'Content-Type': 'application/x-www-form-urlencoded', 'Content-Encoding': 'gzip' },
      Buffer.from('username=a&password=b'),
    );
    expectProblem(login, 400);
    for (const path of ['/posts/', '/votes/']) {
      expectProblem(await postEncoded(path, 'gzip', Buffer.from('{"title":"t","content":"c"}'), auth()), 400);
    }
    expect(await snapshot()).toBe(before);
  });

  test.each(['gzip, gzip', 'gzip, identity', 'compress', 'zstd', 'x-gzip', 'chunked'])(
    'When the Content-Encoding is %j (stacked or not supported), then 415 and nothing is stored',
    async (coding) => {
      const before = await snapshot();
      const res = await postEncoded('/users/', coding, zlib.gzipSync(zlib.gzipSync(registration())));
      expect(expectProblem(res, 415).detail).toMatch(/Content-Encoding/);
      expect(await snapshot()).toBe(before);
    },
  );

  test.each([
    ['gzip', zlib.gzipSync],
    ['deflate', zlib.deflateSync],
    ['br', zlib.brotliCompressSync],
  ] as const)('When the body is validly %s-encoded, then it is read as usual', async (coding, encode) => {
    expect((await postEncoded('/users/', coding, encode(registration()))).status).toBe(201);
  });

  test('When a small gzip body inflates past 100 kB, then 413', async () => {
    const bomb = zlib.gzipSync(JSON.stringify({ title: 'x'.repeat(2_000_000), content: 'c' }));
    expect(bomb.length).toBeLessThan(10_000);
    expectProblem(await postEncoded('/posts/', 'gzip', bomb, auth()), 413);
  });
});

describe('2. Charsets and parameters on every content type the service reads', () => {
  test('When a post comes as application/json; charset=utf-7, then 415 and the <script> it encodes is not stored', async () => {
    const before = await snapshot();
    const res = await postBytes(
      '/posts/',
      { ...auth(), 'Content-Type': 'application/json; charset=utf-7' },
      Buffer.from('{"title": "+ADw-script+AD4-alert(1)+ADw-/script+AD4-", "content": "c"}'),
    );
    expect(expectProblem(res, 415).detail).toMatch(/UTF-8/);
    expect(await snapshot()).toBe(before);
  });

  test('When a registration is UTF-7 with no visible { " or @, then 415 and no account', async () => {
    const body = iconv.encode(JSON.stringify({ email: uniqueEmail('utf7'), password: PASSWORD }), 'utf-7');
    expect(body.toString('latin1')).not.toMatch(/[{"@]/);
    const before = await snapshot();
    const res = await postBytes('/users/', { 'Content-Type': 'application/json; charset=utf-7' }, body);
    expectProblem(res, 415);
    expect(await snapshot()).toBe(before);
  });

  test.each([
    'application/json; charset=utf-16',
    'application/json; charset=utf-16le',
    'application/json; charset=utf-32',
    'application/json; charset=iso-8859-1',
    'application/json; charset=us-ascii',
    'application/json; charset=utf-8; charset=utf-7',
    'application/json; charset=""',
    'application/json; charset=x-unknown',
  ])('When /users/ gets %s, then 415', async (type) => {
    const res = await postBytes('/users/', { 'Content-Type': type }, Buffer.from(registration()));
    expectProblem(res, 415);
  });

  test.each([
    'application/json; charset=utf-8',
    'application/json; charset=UTF-8',
    'application/json;charset="utf-8"',
    'Application/JSON ; Charset = UTF-8',
    'application/json; version=1',
  ])('When /users/ gets %s, then it is read (UTF-8 or no charset)', async (type) => {
    const res = await postBytes('/users/', { 'Content-Type': type }, Buffer.from(registration()));
    expect(res.status).toBe(201);
  });

  /** A login form for an address nobody registered, its content type with `param`. */
  const loginForm = (param: string) =>
    api()
      .post('/login')
      .set('Content-Type', `application/x-www-form-urlencoded; ${param}`)
      .send('username=a%40b.io&password=whatever1');

  test.each(['charset=iso-8859-1', 'charset=utf-7', 'charset=utf-16'])(
    'When the login form says %s, then 415',
    async (param) => {
      expectProblem(await loginForm(param), 415);
    },
  );

  test('When the login form says charset=utf-8, then it is read', async () => {
    expectProblem(await loginForm('charset=utf-8'), 403);
  });
});

describe('3. Declared lengths and Expect against every body limit', () => {
  const huge = (path: string, extra = '') =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: ${path === '/login' ? 'application/x-www-form-urlencoded' : 'application/json'}\r\n` +
    `Authorization: Bearer ${owner.token}\r\nContent-Length: 209715200\r\n${extra}\r\n`;

  test.each(['/users/', '/login', '/votes/', '/posts/'])(
    'When %s declares 200 MB and sends none of it, then 413 problem+json comes at once and the connection closes',
    async (path) => {
      const answer = await raw(huge(path));
      expect(answer.text).toMatch(/^HTTP\/1\.1 413 /);
      expect(answer.firstByteMs).toBeLessThan(2000);
      expect(rawProblem(answer).detail).toBe('The request body is larger than 100 kB');
      expect(answer.text).toMatch(/\r\nConnection: close\r\n/i);
      expect(answer.closed).toBe(true);
    },
  );

  test.each(['/users/', '/login', '/votes/', '/posts/'])(
    'When %s declares 200 MB with Expect: 100-continue, then 413 without any 100 Continue',
    async (path) => {
      const answer = await raw(huge(path, 'Expect: 100-continue\r\n'));
      expect(answer.text).not.toMatch(/100 Continue/);
      expect(answer.text).toMatch(/^HTTP\/1\.1 413 /);
      expect(answer.closed).toBe(true);
    },
  );

  // Answered before any body is read (no token, or a path that reads none): the declared 200 MB
  // would otherwise be waited for and drained, holding the connection as long as the client likes.
  test.each([
    ['POST /posts/ without a token', 'POST /posts/', 'Content-Type: application/json\r\n', 401],
    ['GET /posts/public', 'GET /posts/public', '', 200],
    ['GET /healthz/live', 'GET /healthz/live', '', 200],
  ])(
    'When %s declares a 200 MB body it never sends, then the answer comes at once and the connection closes',
    async (_name, line, extra, status) => {
      const answer = await raw(`${line} HTTP/1.1\r\nHost: x\r\n${extra}Content-Length: 209715200\r\n\r\n`);
      expect(answer.text).toMatch(new RegExp(`^HTTP/1\\.1 ${String(status)} `));
      expect(answer.firstByteMs).toBeLessThan(2000);
      expect(answer.text).toMatch(/\r\nConnection: close\r\n/i);
      expect(answer.closed).toBe(true);
    },
  );

  test('When 100 kB + 1 is declared, then 413; when exactly 100 kB is declared, the body is read', async () => {
    const over = await raw(
      `POST /users/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${100 * 1024 + 1}\r\n\r\n`,
    );
    expect(over.text).toMatch(/^HTTP\/1\.1 413 /);
    const body = JSON.stringify({ email: uniqueEmail('limit'), password: PASSWORD, pad: '' });
    const padded = body.replace('"pad":""', `"pad":"${'x'.repeat(100 * 1024 - body.length)}"`);
    expect(Buffer.byteLength(padded)).toBe(100 * 1024);
    await api().post('/users/').set('Content-Type', 'application/json').send(padded).expect(201);
  });

  test('When a body within the limit asks Expect: 100-continue, then 100 Continue comes first and the request succeeds', async () => {
    const answer = await rawRegistration('100-continue');
    expect(answer.text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /);
  });

  test.each([
    ['100-continue, foo'],
    ['foo, 100-continue'],
    ['100-continue;x=1'],
    ['100-continuex'],
    ['200-ok'],
  ])(
    'When Expect is %j (not exactly 100-continue), then 417 problem+json, no 100 Continue and nothing stored',
    async (expectation) => {
      const before = await snapshot();
      const answer = await rawRegistration(expectation);
      expect(answer.text).not.toMatch(/100 Continue/);
      expect(rawProblem(answer).status).toBe(417);
      expect(await snapshot()).toBe(before);
    },
  );

  test('When Expect is 100-CONTINUE (any case), then it is met', async () => {
    const answer = await rawRegistration('100-CONTINUE');
    expect(answer.text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /);
  });

  test('When a request that will be refused 401 asks Expect: 100-continue, then 401 without 100 Continue', async () => {
    const answer = await raw(
      `POST /posts/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n` +
        `Content-Length: 20\r\nExpect: 100-continue\r\n\r\n`,
    );
    expect(answer.text).toMatch(/^HTTP\/1\.1 401 /);
  });
});

describe('4. Every registered JWT claim: present, absent, wrong type, out of range', () => {
  const now = () => Math.floor(Date.now() / 1000);
  const sign = (payload: Record<string, unknown>) => handSignedToken(owner.user.id, payload);
  const listWith = (token: string) => api().get('/posts/').set(bearer(token));
  test.each([
    ['crit naming an extension nobody knows', { crit: ['unknown'], unknown: 1 }],
    ['crit naming a registered claim', { crit: ['exp'] }],
    ['an empty crit', { crit: [] }],
    ['crit that is not a list', { crit: 'b64' }],
    ['b64 false, listed in crit (RFC 7797)', { b64: false, crit: ['b64'] }],
    ['b64 false alone', { b64: false }],
  ])('When the token header has %s, then 401 and the post stays', async (_name, header) => {
    const post = await newPost(server.base, owner, { title: 't', content: 'c' });
    const forged = handSignedToken(owner.user.id, { iat: now(), exp: now() + 600 }, header);
    expect(expectProblem(await listWith(forged), 401).detail).toBe('Could not validate credentials');
    expectProblem(await api().delete(`/posts/${post.id}`).set(bearer(forged)), 401);
    await api().get(`/posts/${post.id}`).set(auth()).expect(200);
  });

  test('When nbf is 30 s ahead (the documented skew), then the token is accepted; 31 s ahead, refused', async () => {
    const soon = (ahead: number) => {
      // Rounded up, so the service's clock, read a moment later, is still within the second.
      const at = Math.ceil(Date.now() / 1000);
      return sign({
        iat: at - 1,
        nbf: (ahead === 30 ? Math.floor(Date.now() / 1000) : at) + ahead,
        exp: at + 600,
      });
    };
    await listWith(soon(30)).expect(200);
    await listWith(soon(29)).expect(200);
    expectProblem(await listWith(soon(31)), 401);
  });

  const refused: [string, () => Record<string, unknown>][] = [
    ['without exp', () => ({ iat: now() })],
    ['without iat', () => ({ exp: now() + 600 })],
    ['with iat two minutes in the future', () => ({ iat: now() + 120, exp: now() + 600 })],
    ['with exp centuries away', () => ({ iat: now(), exp: now() + 300 * 365 * 24 * 3600 })],
    ['living longer than ACCESS_TOKEN_EXPIRE_MINUTES (31 min)', () => ({ iat: now(), exp: now() + 31 * 60 })],
    ['with exp before iat', () => ({ iat: now(), exp: now() - 1 })],
    ['with exp as a string', () => ({ iat: now(), exp: String(now() + 600) })],
    ['with iat as a string', () => ({ iat: String(now()), exp: now() + 600 })],
    ['with exp null', () => ({ iat: now(), exp: null })],
    ['with nbf in the future', () => ({ iat: now(), nbf: now() + 120, exp: now() + 600 })],
    ['with nbf as a string', () => ({ iat: now(), nbf: 'soon', exp: now() + 600 })],
    ['with an iss the service never issues', () => ({ iat: now(), exp: now() + 600, iss: 'someone' })],
    ['with an aud the service never issues', () => ({ iat: now(), exp: now() + 600, aud: 'someone' })],
    ['with a jti the service never issues', () => ({ iat: now(), exp: now() + 600, jti: 'x' })],
  ];
  test.each(refused)(
    'When the token is %s, then 401 Could not validate credentials',
    async (_name, payload) => {
      const res = await listWith(sign(payload()));
      expect(expectProblem(res, 401).detail).toBe('Could not validate credentials');
    },
  );

  test('When a token without exp tries to delete a post, then 401 and the post stays', async () => {
    const post = await newPost(server.base, owner, { title: 't', content: 'c' });
    const res = await api()
      .delete(`/posts/${post.id}`)
      .set(bearer(sign({ iat: now() })));
    expectProblem(res, 401);
    await api().get(`/posts/${post.id}`).set(auth()).expect(200);
  });

  test.each([
    ['iat 20 s ahead (within the 30 s skew)', () => ({ iat: now() + 20, exp: now() + 600 })],
    ['a lifetime of exactly 30 minutes', () => ({ iat: now(), exp: now() + 30 * 60 })],
    ['nbf now', () => ({ iat: now(), nbf: now(), exp: now() + 600 })],
    ['iat, exp 10 minutes later and nothing else', () => ({ iat: now(), exp: now() + 600 })],
  ])('When the token has %s, then it is accepted', async (_name, payload) => {
    await listWith(sign(payload())).expect(200);
  });
});

describe('4b. If-Match that names no current post', () => {
  test.each([
    ['a stale tag', 'W/"10-stale"'],
    ['a strong stale tag', '"10-stale"'],
    ['a list of stale tags', 'W/"a", W/"b", "c"'],
    ['an empty value', ''],
    ['a bare word', 'garbage'],
    ['a tag left open', 'W/"abc'],
    ['a star with more', '*, W/"a"'],
    ['a tag with a NUL escape', 'W/"\\u0000"'],
    ['a very long list', Array.from({ length: 500 }, (_, i) => `W/"${String(i)}"`).join(', ')],
  ])('When PUT and DELETE carry %s, then 412 problem+json each and nothing changes', async (_name, value) => {
    const post = await newPost(server.base, owner, { title: 'kept', content: 'c' });
    const before = await snapshot();
    expectProblem(
      await api()
        .put(`/posts/${post.id}`)
        .set(auth())
        .set('If-Match', value)
        .send({ title: 'lost', content: 'x' }),
      412,
    );
    expectProblem(await api().delete(`/posts/${post.id}`).set(auth()).set('If-Match', value), 412);
    expect(await snapshot()).toBe(before);
  });
});

describe("5. Errors Node's HTTP layer produces itself", () => {
  test.each([
    ['an HTTP/1.1 request has no Host', '', 'The request has no Host header'],
    [
      'a request has two Host headers',
      'Host: a.example\r\nHost: b.example\r\n',
      'The request has more than one Host header',
    ],
  ])('When %s, then 400 problem+json', async (_name, hosts, detail) => {
    const problem = rawProblem(await raw(`GET /posts/public HTTP/1.1\r\n${hosts}Connection: close\r\n\r\n`));
    expect(problem.status).toBe(400);
    expect(problem.detail).toBe(detail);
  });

  test('When two Host headers arrive on a body endpoint, then 400 and nothing is stored', async () => {
    const before = await snapshot();
    const answer = await rawRegistration(undefined, 'Host: a\r\nhost: b\r\n');
    expect(rawProblem(answer).status).toBe(400);
    expect(await snapshot()).toBe(before);
  });

  test('When an HTTP/1.0 request has no Host, then it is served (Host is an HTTP/1.1 rule)', async () => {
    const answer = await raw('GET /healthz/live HTTP/1.0\r\n\r\n');
    expect(answer.text).toMatch(/^HTTP\/1\.1 200 /);
  });

  test.each(['200-ok', 'continue', 'foo'])(
    'When Expect is %j, then 417 problem+json',
    async (expectation) => {
      const answer = await raw(
        `GET /posts/public HTTP/1.1\r\nHost: x\r\nExpect: ${expectation}\r\nConnection: close\r\n\r\n`,
      );
      expect(rawProblem(answer).status).toBe(417);
    },
  );

  test('When the method is CONNECT, then 405 problem+json rather than a silent close', async () => {
    const answer = await raw('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    const problem = rawProblem(answer);
    expect(problem.status).toBe(405);
    expect(problem.headers).toMatch(/\r\nAllow: /);
  });
});

describe('6. Look-alike e-mail addresses', () => {
  const base64 = 'author.lookalike@example.com';
  let users: number;
  const count = () => countOf(server.db.knex, 'users');

  beforeAll(async () => {
    await register(base64).expect(201);
  });
  beforeEach(async () => {
    users = await count();
  });

  test.each([
    ['a zero-width space', 'author.look\u200Balike@example.com'],
    ['a no-break space', 'author.lookalike\u00A0@example.com'],
    ['a byte-order mark', '\uFEFFauthor.lookalike@example.com'],
    ['a soft hyphen', 'author.look\u00ADalike@example.com'],
    ['a right-to-left override', 'author.\u202Elookalike@example.com'],
    ['a zero-width joiner in the domain', 'author.lookalike@exam\u200Dple.com'],
  ])('When the address differs by %s, then 422 and no account', async (_name, email) => {
    expect(expectProblem(await register(email), 422).detail).toMatch(/invisible, formatting or space/);
    expect(await count()).toBe(users);
  });

  test.each([
    ['Cyrillic а in the local part', '\u0430uthor.lookalike@example.com'],
    ['Cyrillic е in the domain', 'author.lookalike@\u0435xample.com'],
    ['Greek ο in the local part', 'auth\u03BFr.lookalike@example.com'],
    ['a punycode domain that decodes to mixed scripts', 'author.lookalike@xn--xample-2of.com'],
  ])('When the address has %s (mixed scripts), then 422 and no account', async (_name, email) => {
    expect(expectProblem(await register(email), 422).detail).toMatch(/mixes scripts/);
    expect(await count()).toBe(users);
  });

  test.each([
    ['full-width letters', 'ａｕｔｈｏｒ.lookalike@example.com'],
    ['a full-width @', 'author.lookalike＠example.com'],
    ['other letter case', 'AUTHOR.LookAlike@EXAMPLE.COM'],
    ['full-width letters in the domain', 'author.lookalike@ｅｘａｍｐｌｅ.com'],
  ])(
    'When the address differs by %s (the same after NFKC), then 409 and no account',
    async (_name, email) => {
      expectProblem(await register(email), 409);
      expect(await count()).toBe(users);
    },
  );

  test('When an address is registered, then it is stored and returned in its normalised form', async () => {
    const res = await register('ｎｅｗ.ｆｏｒｍ@Example.COM').expect(201);
    expect((res.body as { email: string }).email).toBe('new.form@example.com');
  });

  test('When a single-script non-Latin address registers, then it is accepted, and its punycode domain is the same account', async () => {
    await register('δοκιμή@παράδειγμα.δοκιμή').expect(201);
    await register('user@bücher.example').expect(201);
    expectProblem(await register('user@xn--bcher-kva.example'), 409);
  });

  test('When logging in with a look-alike form that normalises to the address, then it is the same account', async () => {
    for (const username of [
      'ａｕｔｈｏｒ.lookalike@example.com',
      'Author.Lookalike@EXAMPLE.com',
      'author.lookalike@ｅｘａｍｐｌｅ.com',
    ]) {
      await logIn(server.base, username, PASSWORD);
    }
  });

  test('When logging in with an address the policy refuses, then 403 like any unknown address', async () => {
    for (const username of ['author.look\u200Balike@example.com', '\u0430uthor.lookalike@example.com']) {
      const res = await api().post('/login').type('form').send({ username, password: PASSWORD });
      expect(expectProblem(res, 403).detail).toBe('Invalid Credentials');
    }
  });
});

describe('7. Health endpoints: methods and query strings', () => {
  test.each(['/healthz/live', '/healthz/ready'])(
    'When %s is called with a query string, then GET and HEAD answer as without one',
    async (path) => {
      const get = await api().get(`${path}?probe=kubelet&t=1`).expect(200);
      expect(get.body).toEqual({ status: 'ok' });
      expect(get.headers['cache-control']).toBe('no-store');
      expect((await api().head(`${path}?x`)).status).toBe(200);
      expect((await api().get(`${path}?`)).status).toBe(200);
    },
  );

  test.each(['POST', 'PUT', 'PATCH', 'DELETE'])(
    'When the probes are called with %s, then 405 problem+json with Allow: GET, HEAD',
    async (method) => {
      for (const path of ['/healthz/live', '/healthz/ready', '/healthz/ready?x=1']) {
        const res = await api()[method.toLowerCase() as 'post'](path);
        expectProblem(res, 405);
        expect(res.headers.allow).toBe('GET, HEAD');
      }
    },
  );
});

describe('7b. OPTIONS on the probes', () => {
  test('When a probe gets OPTIONS, then CORS answers it as on every API path', async () => {
    expect((await api().options('/healthz/ready?x=1')).status).toBe(200);
    expect((await api().options('/posts/')).status).toBe(200);
  });
});

describe('8. CSRF: what a cross-site form can send changes nothing', () => {
  // The three bodies a cross-site form can send, with and without a token, on every JSON endpoint:
  // json-endpoints.test.ts (401 without a token, 415 with one, nothing changes).

  test('When a foreign origin posts the login form, then the token is only in the body, with no cookie and no CORS grant to read it', async () => {
    const email = uniqueEmail('csrf');
    await register(email).expect(201);
    const res = await api()
      .post('/login')
      .set('Origin', 'https://evil.example')
      .type('form')
      .send({ username: email, password: PASSWORD })
      .expect(200);
    expect(res.headers['set-cookie']).toBeUndefined();
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
    expect(res.headers['access-control-allow-credentials']).toBeUndefined();
  });
});
