import request from 'supertest';
import {
  bearer,
  databaseSnapshot,
  expectProblem,
  newPost,
  uniqueEmail,
  type Account,
  postsFixture,
} from './helpers';

/**
 * What every JSON endpoint answers before its handler runs, as one table: on a secured endpoint a
 * missing or bad token is 401 before the body is even read; then a body in a form's content type is
 * 415, broken JSON 400, more than 100 kB 413. Every answer is problem+json, sets no cookie and
 * changes nothing.
 */

const { service: svc, table: alice } = postsFixture(['table']);
let post: { id: number };

beforeAll(async () => {
  post = await newPost(svc.app, alice);
});

interface JsonEndpoint {
  name: string;
  method: 'post' | 'put';
  path(): string;
  /** Needs a bearer token. */
  secured: boolean;
  /** A body the endpoint accepts. */
  valid(): Record<string, unknown>;
  /** A body its validation refuses (422 with a token). */
  invalid(): Record<string, unknown>;
}

const endpoints: JsonEndpoint[] = [
  {
    name: 'POST /users/',
    method: 'post',
    path: () => '/users/',
    secured: false,
    valid: () => ({ email: uniqueEmail(), password: 'password123' }),
    invalid: () => ({ email: 'not-an-address', password: 'x' }),
  },
  {
    name: 'POST /posts/',
    method: 'post',
    path: () => '/posts/',
    secured: true,
    valid: () => ({ title: 'x', content: 'y' }),
    invalid: () => ({ title: 42 }),
  },
  {
    name: 'PUT /posts/{id}',
    method: 'put',
    path: () => `/posts/${post.id}`,
    secured: true,
    valid: () => ({ title: 'x', content: 'y' }),
    invalid: () => ({ title: 1 }),
  },
  {
    name: 'POST /votes/',
    method: 'post',
    path: () => '/votes/',
    secured: true,
    valid: () => ({ post_id: post.id, dir: 1 }),
    invalid: () => ({ dir: 2 }),
  },
];

/** The only content types a cross-site HTML form can send (and it never sends Authorization). */
const FORM_BODIES: [string, string, string][] = [
  ['text/plain', 'text/plain', '{"title":"csrf","content":"c","ignored":"="}'],
  [
    'multipart/form-data',
    'multipart/form-data; boundary=x',
    '--x\r\nContent-Disposition: form-data; name="title"\r\n\r\ncsrf\r\n--x--\r\n',
  ],
  ['url-encoded', 'application/x-www-form-urlencoded', 'title=csrf&content=c&post_id=1&dir=1'],
];

type Credentials = 'none' | 'valid' | ((alice: Account) => string);

interface Case {
  label: string;
  /** Only on secured endpoints (the refusals of a missing or bad token). */
  securedOnly?: boolean;
  credentials: Credentials;
  send(req: request.Test, endpoint: JsonEndpoint): request.Test;
  status: number;
  detail?: string;
}

const raw = (type: string, text: string) => (req: request.Test) => req.set('Content-Type', type).send(text);
/** Valid JSON cut short. */
const malformed = (endpoint: JsonEndpoint) => JSON.stringify(endpoint.valid()).slice(0, -3);
const oversized = (endpoint: JsonEndpoint) => ({ ...endpoint.valid(), padding: 'p'.repeat(110_000) });
const tampered = (account: Account) => `${account.token.slice(0, -2)}xx`;

/** A secured endpoint called with a token that does not validate. */
const badToken = (
  label: string,
  token: (alice: Account) => string,
  body: (e: JsonEndpoint) => Record<string, unknown>,
): Case => ({
  label,
  securedOnly: true,
  credentials: token,
  send: (req, e) => req.send(body(e)),
  status: 401,
  detail: 'Could not validate credentials',
});

/** A secured endpoint called without a token. */
const noToken = (label: string, send: Case['send']): Case => ({
  label: `no token, ${label}`,
  securedOnly: true,
  credentials: 'none',
  send,
  status: 401,
  detail: 'Not authenticated',
});

const cases: Case[] = [
  // 401 comes first: no body is read, validated or refused before the token is.
  noToken('a valid body', (req, e) => req.send(e.valid())),
  noToken('a body validation refuses', (req, e) => req.send(e.invalid())),
  noToken('malformed JSON', (req, e) => raw('application/json', malformed(e))(req)),
  noToken('a body over 100 kB', (req, e) => req.send(oversized(e))),
  ...FORM_BODIES.map(([name, type, text]) =>
    noToken(`a ${name} form body from a foreign origin`, (req) =>
      raw(type, text)(req.set('Origin', 'https://evil.example')),
    ),
  ),
  badToken(
    'a token that is not a JWT, a valid body',
    () => 'not.a.jwt',
    (e) => e.valid(),
  ),
  badToken('a token with a tampered signature, a valid body', tampered, (e) => e.valid()),
  badToken(
    'a garbage token, a body validation refuses',
    () => 'garbage',
    (e) => e.invalid(),
  ),
  {
    label: 'malformed JSON',
    credentials: 'valid',
    send: (req, e) => raw('application/json', malformed(e))(req),
    status: 400,
  },
  ...['null', '"a string"', '42'].map((text): Case => ({
    label: `valid JSON that is not an object (${text})`,
    credentials: 'valid',
    send: (req) => raw('application/json', text)(req),
    status: 422,
    detail: 'Invalid body: value must be of type object',
  })),
  {
    label: 'a body over 100 kB',
    credentials: 'valid',
    send: (req, e) => req.send(oversized(e)),
    status: 413,
  },
  ...FORM_BODIES.map(([name, type, text]): Case => ({
    label: `a ${name} form body (what a cross-site form sends)`,
    credentials: 'valid',
    send: (req) => raw(type, text)(req),
    status: 415,
  })),
];

const table = endpoints.flatMap((endpoint) =>
  cases
    .filter((c) => endpoint.secured || !c.securedOnly)
    .map((c) => [endpoint.name, c.label, c.status, endpoint, c] as const),
);

test.each(table)(
  'When %s gets %s, then %i problem+json and nothing changes',
  async (_name, _label, status, endpoint, c) => {
    const before = await databaseSnapshot(svc.db);
    let req = request(svc.app)[endpoint.method](endpoint.path());
    if (c.credentials === 'valid') req = req.set(bearer(alice));
    else if (typeof c.credentials === 'function') req = req.set(bearer(c.credentials(alice)));
    const res = await c.send(req, endpoint);
    const problem = expectProblem(res, status);
    if (c.detail) expect(problem.detail).toBe(c.detail);
    if (status === 401) expect(res.headers['www-authenticate']).toBe('Bearer');
    // Nothing about the parser or the stack leaks into the answer.
    expect(res.text).not.toMatch(/SyntaxError|at JSON\.parse|node_modules/);
    expect(res.headers['set-cookie']).toBeUndefined();
    expect(await databaseSnapshot(svc.db)).toBe(before);
  },
);
