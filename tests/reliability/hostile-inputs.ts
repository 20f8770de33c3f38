/**
 * The hostile-input generators of tests/reliability/hostile.test.ts (fast-check arbitraries and fixed
 * lists): what a hostile client sends, per family of attack, derived from the service's own
 * OpenAPI document, each request with what its answer must be (refused, or one status). The test
 * sends them and checks every answer.
 */
import zlib from 'node:zlib';
import fc from 'fast-check';
import jwt from 'jsonwebtoken';
import { SECRET } from './support';
import { handSignedToken, unsignedToken } from '../../tools/harness/hostile';

export interface Schema {
  type?: string;
  format?: string;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  maxLength?: number;
  properties?: Record<string, Schema>;
  $ref?: string;
}

export interface Parameter {
  name: string;
  in: 'path' | 'query';
  schema: Schema;
  $ref?: string;
}

export interface Operation {
  method: string;
  path: string;
  params: Parameter[];
  body?: { type: 'json' | 'form'; schema: Schema };
  /** Whether it needs a bearer token. */
  secured: boolean;
}

export interface HostileRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  label: string;
  /** The attack families this request belongs to (counted, so each is shown to be generated). */
  families?: string[];
  /** Why this request must be refused (no 2xx): it carries something the service must not accept. */
  mustRefuse?: string;
  /** The only statuses it may get. */
  expectStatus?: number[];
  /** Sent on a socket of its own with Connection: close (a declared length it never sends). */
  fresh?: boolean;
  /** Bytes written as they are on a socket of their own: requests no HTTP client would send. */
  raw?: string;
}

/** The operations the service documents, read from its own OpenAPI document. */
export function operationsOf(doc: {
  paths: Record<string, Record<string, unknown>>;
  components: { parameters: Record<string, Parameter>; schemas: Record<string, Schema> };
}): Operation[] {
  const resolveSchema = (s: Schema): Schema => {
    const ref = s.$ref?.split('/').pop();
    return ref ? resolveSchema(doc.components.schemas[ref] ?? {}) : s;
  };
  const resolveParam = (p: Parameter): Parameter => {
    const ref = p.$ref?.split('/').pop();
    return ref ? (doc.components.parameters[ref] as Parameter) : p;
  };
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    const shared = ((item.parameters ?? []) as Parameter[]).map(resolveParam);
    for (const [method, raw] of Object.entries(item)) {
      if (method === 'parameters') continue;
      const op = raw as {
        parameters?: Parameter[];
        requestBody?: { content: Record<string, { schema: Schema }> };
        security?: unknown[];
      };
      const content = op.requestBody?.content ?? {};
      const json = content['application/json'];
      const form = content['application/x-www-form-urlencoded'];
      ops.push({
        method: method.toUpperCase(),
        path,
        params: [...shared, ...(op.parameters ?? []).map(resolveParam)],
        secured: (op.security ?? []).length > 0,
        body: json
          ? { type: 'json', schema: resolveSchema(json.schema) }
          : form
            ? { type: 'form', schema: resolveSchema(form.schema) }
            : undefined,
      });
    }
  }
  return ops;
}

/** Percent-encodes every byte outside the unreserved set; lone surrogates go as U+FFFD, as a client would send them. */
const pct = (s: string): string =>
  [...Buffer.from(s, 'utf8')]
    .map((b) =>
      /[A-Za-z0-9\-._~]/.test(String.fromCharCode(b))
        ? String.fromCharCode(b)
        : `%${b.toString(16).toUpperCase().padStart(2, '0')}`,
    )
    .join('');

const CONTROL = fc
  .array(fc.integer({ min: 0, max: 31 }), { minLength: 1, maxLength: 8 })
  .map((codes) => String.fromCharCode(...codes, 0x7f));

/** Strings a client should never send, and some it rightly may. */
const hostileString: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  CONTROL,
  fc.string({ maxLength: 10 }).map((s) => `${s}\0${s}`),
  fc.integer({ min: 250, max: 120_000 }).map((n) => 'x'.repeat(n)),
  fc.constantFrom('\uD800', 'a\uDFFFb', '\uFEFF', '\u202E', '\u00A0', '\u200B', ' ', '\t\n', ''),
  fc.constantFrom("' OR 1=1 --", '%', '_', '\\', '%_%', "'; DROP TABLE posts; --", '${7*7}', '<script>'),
  fc.constantFrom('1', '-1', '0', '1.5', '1e3', '0x10', 'NaN', 'Infinity', '2147483648', '9'.repeat(40)),
);

const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  hostileString,
  fc.integer(),
  fc.double(),
  fc.constantFrom(null, true, false, 0, -1, 2147483648, Number.MAX_SAFE_INTEGER + 2, 1.5, -0),
  fc.anything({ maxDepth: 3 }),
  fc.array(fc.integer(), { maxLength: 5 }),
);

function validValue(name: string, schema: Schema, postIds: number[]): fc.Arbitrary<unknown> {
  if (schema.enum) return fc.constantFrom(...schema.enum);
  if (name === 'post_id' || name === 'id') return fc.constantFrom(...postIds, 1, 2147483647);
  switch (schema.type) {
    case 'integer':
      return fc.integer({ min: schema.minimum ?? -1000, max: Math.min(schema.maximum ?? 1000, 1000) });
    case 'boolean':
      return fc.boolean();
    case 'string':
      if (schema.format === 'email' || name === 'username')
        return fc.oneof(
          fc.emailAddress(),
          lookalikeEmail,
          fc.constantFrom('author@example.com', 'other@example.com'),
        );
      if (name === 'password') return fc.string({ minLength: 8, maxLength: 30 });
      return fc.string({ minLength: 1, maxLength: Math.min(schema.maxLength ?? 60, 60) });
    default:
      return fc.anything({ maxDepth: 2 });
  }
}

/** Each field valid, hostile or missing, plus fields nobody asked for. */
function objectValue(schema: Schema, postIds: number[]): fc.Arbitrary<Record<string, unknown>> {
  const fields = Object.entries(schema.properties ?? {}).map(([name, s]) =>
    fc
      .oneof(
        { weight: 3, arbitrary: validValue(name, s, postIds).map((v) => ({ v })) },
        { weight: 2, arbitrary: hostileValue.map((v) => ({ v })) },
        { weight: 1, arbitrary: fc.constant(undefined) },
      )
      .map((slot) => [name, slot] as const),
  );
  return fc
    .tuple(fc.tuple(...fields), fc.dictionary(fc.string({ maxLength: 12 }), hostileValue, { maxKeys: 3 }))
    .map(([slots, extra]) => {
      const out: Record<string, unknown> = { ...extra };
      for (const [name, slot] of slots) if (slot) out[name] = slot.v;
      return out;
    });
}

type Body = { body: Buffer; label: string };

/** Bodies that are not what JSON parsers expect: deep, huge, broken, mis-encoded. */
const rawJsonBody: fc.Arbitrary<Body> = fc.oneof(
  fc
    .integer({ min: 100, max: 45_000 })
    .map((d) => ({ body: Buffer.from('['.repeat(d) + ']'.repeat(d)), label: 'deep-array' })),
  fc.integer({ min: 100, max: 18_000 }).map((d) => ({
    body: Buffer.from('{"a":'.repeat(d) + '1' + '}'.repeat(d)),
    label: 'deep-object',
  })),
  fc.integer({ min: 101, max: 400 }).map((kb) => ({
    body: Buffer.from(JSON.stringify({ title: 'x'.repeat(kb * 1024), content: 'c' })),
    label: 'huge',
  })),
  fc
    .constantFrom(
      '{"title": "a", "content": ',
      '{"title": "a" "content": "b"}',
      "{'title': 'a'}",
      '{"title": "a\u0000b", "content": "c"}',
      '{"title": "a\\u0000b", "content": "c"}',
      '{"post_id": 1e400, "dir": 1}',
      '{"post_id": -1e-400, "dir": 1}',
      '{"post_id": 1, "dir": 1, "post_id": "x"}',
      '{"__proto__": {"admin": true}, "title": "t", "content": "c"}',
      '{"constructor": {"prototype": {"x": 1}}, "email": "a@b.io", "password": "password1"}',
      '[]',
      '"just a string"',
      'null',
      '12',
      '',
      '\uFEFF{"title": "bom", "content": "c"}',
      'NaN',
    )
    .map((s) => ({ body: Buffer.from(s), label: 'malformed' })),
  fc
    .uint8Array({ minLength: 1, maxLength: 200 })
    .map((bytes) => ({ body: Buffer.from(bytes), label: 'random-bytes' })),
  fc.constant({
    body: Buffer.concat([
      Buffer.from('{"title": "'),
      Buffer.from([0xff, 0xfe, 0xc3, 0x28]),
      Buffer.from('", "content": "c"}'),
    ]),
    label: 'invalid-utf8',
  }),
);

const CONTENT_TYPES = [
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json; charset=latin1',
  'application/json; charset=utf-16',
  'application/vnd.api+json',
  'application/problem+json',
  'application/xml',
  '*/*',
  'application/json, text/plain',
  ';;;',
];

/** Path segments for {id}: fine, out of range, or not numbers at all. */
const idSegment = (postIds: number[]): fc.Arbitrary<string> =>
  fc.oneof(
    fc.constantFrom(...postIds.map(String)),
    fc.integer().map(String),
    hostileString.map((s) => pct(s.slice(0, 3000))),
    fc.constantFrom(
      '%',
      '%zz',
      '%00',
      '%2F',
      '%2e%2e',
      '..',
      '.',
      '1;x=1',
      '1%20',
      '+1',
      '01',
      '1.0',
      'null',
      '%FF%FE',
    ),
  );

/** Query strings with wrong types, repeats, bracket syntax, broken escapes and unknown names. */
function queryString(params: Parameter[]): fc.Arbitrary<string> {
  const parts = params
    .filter((p) => p.in === 'query')
    .map((p) =>
      fc.oneof(
        fc.constant(''),
        validValue(p.name, p.schema, [1]).map((v) => `${p.name}=${pct(String(v))}`),
        hostileString.map((v) => `${p.name}=${pct(v.slice(0, 3000))}`),
        fc.constantFrom(
          `${p.name}=1&${p.name}=2`,
          `${p.name}[a]=1`,
          `${p.name}=`,
          p.name,
          `${p.name}=%`,
          `${p.name}=%FF`,
          `${p.name}=1e2`,
          `${p.name}=-0`,
          `${p.name}=%00`,
          // Past a documented ceiling (skip's 10000) and the largest safe integer: bounds hold at their edges.
          `${p.name}=10001`,
          `${p.name}=9007199254740991`,
          // Searches no index serves: answered, or at worst refused with 503 while others run.
          `${p.name}=%25%25`,
          `${p.name}=_`,
        ),
      ),
    );
  return fc
    .tuple(
      fc.tuple(...parts),
      fc.constantFrom('', 'x=1', '&&&', '=', 'a=%E0%A4%A', '__proto__=1', 'constructor[x]=1'),
    )
    .map(([ps, extra]) => [...ps, extra].filter((s) => s !== '').join('&'));
}

/** Variations on the path itself, which routing must refuse cleanly. */
const pathOddity: fc.Arbitrary<(p: string) => string> = fc.constantFrom(
  (p: string) => p,
  (p: string) => p,
  (p: string) => p,
  (p: string) => (p.endsWith('/') ? p.slice(0, -1) : `${p}/`),
  (p: string) => `/${p}`,
  (p: string) => p.toUpperCase(),
  (p: string) => `${p}/..`,
  (p: string) => `${p};jsessionid=1`,
  (p: string) => p.replace('/', '/%2e/'),
  (p: string) => `${p}/extra/segments`,
  (p: string) => `${p}%00`,
);

/** Paths nobody documented: unknown, docs assets, broken escapes. */
const wildPath: fc.Arbitrary<string> = fc.oneof(
  fc
    .array(
      hostileString.map((s) => pct(s.slice(0, 200))),
      { maxLength: 4 },
    )
    .map((segs) => `/${segs.join('/')}`),
  fc.constantFrom(
    '/docs/%ff',
    '/docs/../package.json',
    '/docs/%2e%2e/%2e%2e/etc/passwd',
    '/openapi.json/x',
    '/healthz/ready/',
    '/%',
    '//',
    '/*',
    '/posts/public/1',
    '/votes',
    '/users',
    '/Login',
    '/login/',
    `/${'a'.repeat(7000)}`,
  ),
);

/** Look-alikes of the seeded addresses: invisible characters, full-width, other scripts, case. */
const INVISIBLES = ['\u200B', '\u00A0', '\uFEFF', '\u00AD', '\u200D', '\u202E', '\u2060', '\u180E', '\u3000'];
const CONFUSABLES: Record<string, string> = {
  a: '\u0430',
  e: '\u0435',
  o: '\u043E',
  p: '\u0440',
  c: '\u0441',
  x: '\u0445',
  i: '\u0456',
};
const LOOKALIKES: Record<string, (email: string, at: number, invisible: string) => string> = {
  invisible: (email, at, invisible) => email.slice(0, at) + invisible + email.slice(at),
  // Full-width Latin sits 0xFEE0 above ASCII; NFKC maps it back.
  'full-width': (email, at) =>
    email.replace(/[a-z]/g, (ch, i: number) =>
      i <= at ? String.fromCharCode(ch.charCodeAt(0) + 0xfee0) : ch,
    ),
  cyrillic: (email) => email.replace(/[aeopcxi]/, (ch) => CONFUSABLES[ch] ?? ch),
  greek: (email) => email.replace('o', '\u03BF'),
  case: (email) => email.toUpperCase(),
  'full-width-at': (email) => email.replace('@', '\uFF20'),
  punycode: (email) => email.replace('example.com', 'xn--xample-2of.com'),
  'greek-all': (email) => email.replace(/^[a-z]+/, '\u03B1\u03C5\u03C4\u03BF'),
};
const lookalikeEmail: fc.Arbitrary<string> = fc
  .tuple(
    fc.constantFrom('author@example.com', 'other@example.com'),
    fc.nat(),
    fc.constantFrom(...Object.values(LOOKALIKES)),
    fc.constantFrom(...INVISIBLES),
  )
  .map(([email, n, lookalike, invisible]) => lookalike(email, n % email.length, invisible));

/** Content-Encoding on a body: valid, corrupt, truncated, stacked, unknown. */
type Coding = { header: string; encode: (body: Buffer) => Buffer; label: string };
const gzip = (b: Buffer) => zlib.gzipSync(b);
const asIs = (b: Buffer) => b;
const codingsRead: Coding[] = [
  { header: 'gzip', encode: gzip, label: 'gzip' },
  { header: 'deflate', encode: (b) => zlib.deflateSync(b), label: 'deflate' },
  { header: 'br', encode: (b) => zlib.brotliCompressSync(b), label: 'br' },
  { header: 'GZIP', encode: gzip, label: 'gzip-upper' },
  { header: 'identity', encode: asIs, label: 'identity' },
];
const codingsRefused: Coding[] = [
  { header: 'gzip', encode: asIs, label: 'gzip-corrupt' },
  { header: 'deflate', encode: asIs, label: 'deflate-corrupt' },
  { header: 'br', encode: (b) => Buffer.concat([Buffer.from([0xff]), b]), label: 'br-corrupt' },
  { header: 'gzip', encode: (b) => gzip(b).subarray(0, 12), label: 'gzip-truncated' },
  { header: 'deflate', encode: (b) => zlib.deflateSync(b).subarray(0, 4), label: 'deflate-truncated' },
  { header: 'gzip, gzip', encode: (b) => gzip(gzip(b)), label: 'stacked' },
  { header: 'identity, gzip', encode: gzip, label: 'stacked-identity' },
  { header: 'compress', encode: asIs, label: 'unknown' },
  { header: 'zstd', encode: asIs, label: 'zstd' },
  { header: 'x-gzip', encode: gzip, label: 'x-gzip' },
];
const codings = [
  ...codingsRead.map((c) => ({ ...c, refused: false })),
  ...codingsRefused.map((c) => ({ ...c, refused: true })),
];

/** Parameters on the content type a body endpoint reads: only UTF-8 (or none) is read. */
const typeParameters: fc.Arbitrary<{ params: string; refused: boolean }> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ params: '', refused: false }) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom(
        '; charset=utf-8',
        '; charset=UTF-8',
        ';charset="utf-8"',
        '; version=1',
        '; boundary=x',
        ';',
        '; charset',
      )
      .map((params) => ({ params, refused: false })),
  },
  {
    weight: 3,
    arbitrary: fc
      .constantFrom(
        '; charset=utf-7',
        '; charset=utf-16',
        '; charset=UTF-16LE',
        '; charset=utf-32',
        '; charset=iso-8859-1',
        '; charset=us-ascii',
        '; charset=utf8',
        '; charset=utf-8; charset=utf-7',
        '; charset=""',
      )
      .map((params) => ({ params, refused: true })),
  },
);

/** Declared lengths over every body limit (100 kB), the body never sent; and Expect values. */
const declaredLength = fc.constantFrom(102_401, 1_048_576, 209_715_200, 1_000_000_000_000_000);
const expectation = fc.constantFrom(
  '100-continue',
  '100-Continue',
  '200-ok',
  'foo',
  '',
  '100-continue, foo',
  'foo, 100-continue',
  '100-continue;q=1',
  '100-continuex',
);

/** A token signed with the right secret and what is wrong with it: its claims, or its header's crit or b64. */
type Forged = { token: string; family: 'claims' | 'crit' | 'b64' };

/**
 * Tokens with a valid signature and claims whose JOSE header asks for what the service does not
 * do: `crit` extensions (RFC 7515 §4.1.11) and `b64` (RFC 7797). Each is refused.
 */
function joseHeaderTokens(userId: number): Forged[] {
  const now = Math.floor(Date.now() / 1000);
  // Valid for 29 minutes (inside ACCESS_TOKEN_EXPIRE_MINUTES): only the header is wrong, for the whole run.
  const sign = (header: Record<string, unknown>) =>
    handSignedToken(userId, { iat: now, exp: now + 29 * 60 }, header);
  return [
    { token: sign({ crit: ['unknown'], unknown: true }), family: 'crit' },
    { token: sign({ crit: ['exp'] }), family: 'crit' },
    { token: sign({ crit: [] }), family: 'crit' },
    { token: sign({ crit: 'x' }), family: 'crit' },
    { token: sign({ b64: false, crit: ['b64'] }), family: 'b64' },
    { token: sign({ b64: false }), family: 'b64' },
    { token: sign({ b64: true }), family: 'b64' },
  ];
}

/** If-Match values that name no current post: each PUT or DELETE carrying one changes nothing. */
const staleIfMatch = fc.constantFrom(
  'W/"10-stale"',
  '"10-stale"',
  'W/"a", "b"',
  '',
  'garbage',
  'W/"open',
  '*, W/"a"',
  Array.from({ length: 200 }, (_, i) => `W/"${String(i)}"`).join(', '),
);

/** Requests Node's HTTP layer turns away (or would, left alone): each answered problem+json. */
const registration = '{"email":"raw@example.com","password":"password123"}';
const protocolRequests: string[] = [
  'GET /posts/public HTTP/1.1\r\nConnection: close\r\n\r\n',
  'GET /healthz/ready HTTP/1.1\r\nConnection: close\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: a\r\nHost: a\r\nConnection: close\r\n\r\n',
  `POST /users/ HTTP/1.1\r\nHost: a\r\nhost: b\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${registration.length}\r\n\r\n${registration}`,
  'GET /posts/public HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n',
  'HELLO THERE\r\n\r\n',
  'GET /posts/public HTTP/9.9\r\nHost: x\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
  'POST /users/ HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!',
  'POST /users/ HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
  'POST /users/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost : x\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: x\u0000y\r\n\r\n',
  `GET /posts/public HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
  'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n',
  'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n',
  'GET http://evil.example/posts/public HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
  'GET /healthz/live HTTP/1.0\r\n\r\n',
];

/** The probes: every method, with and without the query strings probes and balancers add. */
const healthRequest: fc.Arbitrary<HostileRequest> = fc
  .record({
    path: fc.constantFrom('/healthz/live', '/healthz/ready'),
    query: fc.constantFrom('', '?', '?x=1', '?probe=kubelet&t=1', '?%ZZ', '?a=%00', '?a=1&a=2'),
    method: fc.constantFrom('GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'TRACE'),
  })
  .map(({ path, query, method }) => ({
    method,
    path: path + query,
    headers: {},
    label: 'health',
    families: ['health'],
    expectStatus: method === 'GET' || method === 'HEAD' ? [200] : [405],
  }));

/** Tokens signed with the right secret whose registered claims are absent, mistyped or out of range. */
function claimTokens(userId: number): Forged[] {
  const now = Math.floor(Date.now() / 1000);
  const sign = (payload: Record<string, unknown>) => handSignedToken(userId, payload);
  // The run lasts minutes: every time here is far enough from now to stay wrong throughout.
  const day = 24 * 3600;
  return [
    sign({ iat: now }),
    sign({ exp: now + day }),
    sign({ iat: now + day, exp: now + day + 600 }),
    sign({ iat: now, exp: now + 300 * 365 * day }),
    sign({ iat: now - 600, exp: now + day }),
    sign({ iat: now, exp: String(now + day) }),
    sign({ iat: String(now), exp: now + day }),
    sign({ iat: now, exp: null }),
    sign({ iat: now, exp: { $gt: 0 } }),
    sign({ iat: now, exp: 1e308 }),
    sign({ iat: -1e308, exp: now + 600 }),
    sign({ iat: now, exp: now + 600, nbf: now + day }),
    sign({ iat: now, exp: now + 600, nbf: 'soon' }),
    sign({ iat: now, exp: now + 600, iss: 'someone' }),
    sign({ iat: now, exp: now + 600, aud: 'someone' }),
    sign({ iat: now, exp: now + 600, jti: '1' }),
    sign({ iat: now - 2 * day, exp: now - day }),
  ].map((token) => ({ token, family: 'claims' }));
}

function tokensFor(userId: number, valid: string): string[] {
  const now = Math.floor(Date.now() / 1000);
  const sign = (payload: object, secret = SECRET, algorithm: jwt.Algorithm = 'HS256') =>
    jwt.sign(payload, secret, { algorithm });
  const [header = '', body = ''] = valid.split('.');
  return [
    valid,
    sign({ sub: String(userId) }, 'another-secret-that-is-long-enough-0123456789'),
    sign({ sub: String(userId), exp: now - 60 }),
    sign({ sub: 'abc' }),
    sign({ sub: '0' }),
    sign({ sub: '999999' }),
    sign({ sub: '99999999999999999999' }),
    sign({ sub: userId }),
    sign({ sub: `0${String(userId)}` }),
    sign({ sub: String(userId) }, SECRET, 'HS512'),
    sign({}),
    unsignedToken({ sub: String(userId) }),
    `${header}.${body}.`,
    `${header}.${body}.${'A'.repeat(43)}`,
    `${valid}x`,
    'abc.def.ghi',
    '...',
    'x'.repeat(4000),
    '',
  ];
}

/** Who the generated requests act as: the posts they name, the author of the first and the tokens at hand. */
export interface Cast {
  postIds: number[];
  authorId: number;
  /** The author's token. */
  writer: string;
  /** Another user's token. */
  other: string;
}

/** The Authorization header: mostly a token (valid or forged), else a malformed or missing one. */
function authorization({ authorId, writer, other }: Cast): fc.Arbitrary<string | undefined> {
  const tokens = [...tokensFor(authorId, writer), other];
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...tokens).map((t) => `Bearer ${t}`) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '',
        'Bearer',
        'Bearer  ',
        'Basic dXNlcjpwYXNz',
        `bearer ${writer}`,
        `Bearer ${writer} extra`,
        `Token ${writer}`,
      ),
    },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}

/** A form body: the operation's fields form-encoded, or one of the malformed forms. */
const formBody = (o: Record<string, unknown>): fc.Arbitrary<Body> =>
  fc.oneof(
    fc.constant({
      body: Buffer.from(
        new URLSearchParams(
          Object.entries(o).map(([k, v]): [string, string] => [
            k,
            typeof v === 'string' ? v : JSON.stringify(v),
          ]),
        ).toString(),
      ),
      label: 'form',
    }),
    fc
      .constantFrom(
        'username=%ZZ&password=x',
        'username=a&username=b&password=p',
        'username[x]=1&password=p',
        Array.from({ length: 25 }, (_, i) => `f${String(i)}=1`).join('&'),
        'username=%FF%FE&password=%00',
        'username=author%40example.com&password=correct+horse+battery',
      )
      .map((s) => ({ body: Buffer.from(s), label: 'form-raw' })),
  );

/** The body an operation is sent with: its own kind (JSON or form), mostly well formed; any JSON where it reads none. */
function bodyFor(op: Operation, postIds: number[]): fc.Arbitrary<Body | undefined> {
  if (!op.body) return fc.option(rawJsonBody, { nil: undefined });
  if (op.body.type !== 'json') return objectValue(op.body.schema, postIds).chain(formBody);
  return fc.oneof(
    {
      weight: 5,
      arbitrary: objectValue(op.body.schema, postIds).map((o) => ({
        body: Buffer.from(JSON.stringify(o)),
        label: 'object',
      })),
    },
    { weight: 2, arbitrary: rawJsonBody },
  );
}

/** `arbitrary` on `share` draws in `share + weight` (the attack's share), otherwise nothing. */
const sometimes = <T>(weight: number, arbitrary: fc.Arbitrary<T>, share = 1): fc.Arbitrary<T | undefined> =>
  fc.oneof({ weight, arbitrary: fc.constant(undefined) }, { weight: share, arbitrary });

/** One documented operation's draw: its method mostly, its parameters and body, and the attack families on a share each. */
const drawFor = (op: Operation, cast: Cast, auth: fc.Arbitrary<string | undefined>) =>
  fc.record({
    op: fc.constant(op),
    method: fc.oneof(
      { weight: 6, arbitrary: fc.constant(op.method) },
      { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS') },
    ),
    id: idSegment(cast.postIds),
    query: queryString(op.params),
    oddity: pathOddity,
    auth,
    body: bodyFor(op, cast.postIds),
    contentType: fc.oneof(
      { weight: 6, arbitrary: fc.constant(undefined) },
      { weight: 2, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
      { weight: 1, arbitrary: fc.constant('none') },
    ),
    chunked: fc.boolean(),
    claim: sometimes(6, fc.constantFrom(...claimTokens(cast.authorId))),
    coding: sometimes(5, fc.constantFrom(...codings), 2),
    params: sometimes(5, typeParameters, 2),
    length: sometimes(10, declaredLength),
    expect: sometimes(10, expectation),
    jose: sometimes(12, fc.constantFrom(...joseHeaderTokens(cast.authorId))),
    ifMatch: sometimes(4, staleIfMatch),
  });

/** What is drawn for one documented operation, before it becomes a request. */
type Draw = ReturnType<typeof drawFor> extends fc.Arbitrary<infer D> ? D : never;

/** The credentials and preconditions a draw carries, as headers; why the request must be refused, if it must. */
function credentials(d: Draw, headers: Record<string, string>, families: string[]): string | undefined {
  const { op, method, id } = d;
  let mustRefuse: string | undefined;
  if (d.auth !== undefined) headers.Authorization = d.auth;
  // A header token after a claims token: the last one drawn is the one sent.
  for (const forged of [d.claim, d.jose]) {
    if (forged === undefined) continue;
    headers.Authorization = `Bearer ${forged.token}`;
    families.push(forged.family);
    if (op.secured && method === op.method && id !== 'public')
      mustRefuse =
        forged.family === 'claims' ? 'its token has bad claims' : `its token header has ${forged.family}`;
  }
  if (d.ifMatch !== undefined && op.path === '/posts/{id}' && method === op.method && op.method !== 'GET') {
    headers['If-Match'] = d.ifMatch;
    families.push('if-match');
    // Whatever else is wrong with it, a change under a tag of no current post never succeeds.
    mustRefuse ??= 'its If-Match names no current post';
  }
  return mustRefuse;
}

/**
 * The body as sent, with the headers that frame it (type, coding, length), and why the request must
 * be refused for it, if it must. `reads`: the documented operation itself, whose refusal it must be.
 */
function framedBody(
  d: Draw,
  reads: boolean,
  headers: Record<string, string>,
  families: string[],
): { bytes?: Buffer; fresh: boolean; mustRefuse?: string } {
  const { body, params, coding, length } = d;
  let bytes = body?.body;
  if (!body || !bytes) return { bytes, fresh: false };
  let mustRefuse: string | undefined;
  const natural = d.op.body?.type === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
  if (d.contentType === undefined && params) {
    families.push('charset');
    if (params.refused && reads) mustRefuse ??= `it is ${natural}${params.params}`;
  }
  if (d.contentType !== 'none') headers['Content-Type'] = d.contentType ?? natural + (params?.params ?? '');
  if (coding) {
    bytes = coding.encode(bytes);
    headers['Content-Encoding'] = coding.header;
    families.push('encoding');
    if (coding.refused && reads) mustRefuse ??= `its Content-Encoding is ${coding.label}`;
  }
  if (
    /author|other|αυτο/i.test(bytes.toString().normalize('NFKC')) &&
    /[^\x20-\x7e]|AUTHOR|OTHER|xn--/.test(bytes.toString())
  )
    families.push('email');
  if (length !== undefined) {
    // Declared, never sent: the answer must come from the declared length alone.
    headers['Content-Length'] = String(length);
    families.push('length');
    if (reads) mustRefuse ??= `it declares ${String(length)} bytes`;
    return { fresh: true, mustRefuse };
  }
  if (d.chunked) headers['Transfer-Encoding'] = 'chunked';
  else headers['Content-Length'] = String(bytes.length);
  return { bytes, fresh: false, mustRefuse };
}

/** A draw as the request it makes, with its attack families and what its answer may be. */
function requestOf(d: Draw): HostileRequest {
  const { op, method } = d;
  const path = d.oddity(op.path.replace('{id}', d.id)) + (d.query ? `?${d.query}` : '');
  const headers: Record<string, string> = {};
  const families: string[] = [];
  let mustRefuse = credentials(d, headers, families);
  const sent = framedBody(d, method === op.method && op.body !== undefined, headers, families);
  mustRefuse ??= sent.mustRefuse;
  let expectStatus: number[] | undefined;
  if (d.expect !== undefined) {
    headers.Expect = d.expect;
    families.push('expect');
    if (!/^100-continue$/i.test(d.expect)) expectStatus = [417];
  }
  return {
    method,
    path,
    headers,
    body: sent.bytes,
    label: `${op.method} ${op.path} ${[d.body?.label, ...families].filter(Boolean).join(' ')}`.trim(),
    families,
    mustRefuse,
    expectStatus,
    fresh: sent.fresh,
  };
}

/**
 * Every hostile request: the documented operations with the attack families (most of them),
 * undocumented paths, the probes and raw protocol abuse.
 */
export function hostileRequests(ops: Operation[], cast: Cast): fc.Arbitrary<HostileRequest> {
  const auth = authorization(cast);
  const documented = fc
    .constantFrom(...ops)
    .chain((op) => drawFor(op, cast, auth))
    .map(requestOf);
  const undocumented: fc.Arbitrary<HostileRequest> = fc
    .record({
      path: wildPath,
      method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH'),
      auth,
    })
    .map(({ path, method, auth }) => {
      const headers: Record<string, string> = {};
      if (auth !== undefined) headers.Authorization = auth;
      return { method, path, headers, label: 'undocumented path' };
    });
  const protocol: fc.Arbitrary<HostileRequest> = fc.constantFrom(...protocolRequests).map((raw) => ({
    method: raw.slice(0, raw.indexOf(' ')),
    path: raw.slice(0, raw.indexOf('\r')),
    headers: {},
    raw,
    label: 'protocol',
    families: ['protocol'],
    mustRefuse: /host: b/i.test(raw) ? 'it has two Host headers' : undefined,
  }));
  return fc.oneof(
    { weight: 9, arbitrary: documented },
    { weight: 1, arbitrary: undocumented },
    { weight: 1, arbitrary: healthRequest },
    { weight: 1, arbitrary: protocol },
  );
}
