import { createHmac } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import fc from 'fast-check';
import jwt from 'jsonwebtoken';
import type { Knex } from 'knex';
import {
  account,
  call,
  connect,
  createDatabase,
  createPosts,
  report,
  SECRET,
  startService,
  stopAllServices,
  type ServiceProcess,
} from './support';
import { normaliseEmail } from '../service/src/users/email';

const SEED = 20261121;
/** The families of issue 11; each must be generated (see the report line). */
const FAMILIES = ['encoding', 'charset', 'length', 'expect', 'claims', 'email', 'health', 'protocol'];
const RUNS = 5000;

interface Schema {
  type?: string;
  format?: string;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  maxLength?: number;
  properties?: Record<string, Schema>;
  required?: string[];
  $ref?: string;
}

interface Parameter {
  name: string;
  in: 'path' | 'query';
  schema: Schema;
  $ref?: string;
}

interface Operation {
  method: string;
  path: string;
  params: Parameter[];
  body?: { type: 'json' | 'form'; schema: Schema };
  /** Whether it needs a bearer token. */
  secured: boolean;
}

interface HostileRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  label: string;
  /** The families of issue 11 this request belongs to (counted, so each is shown to be generated). */
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

let database: { name: string; drop(): Promise<void> };
let db: Knex;
let svc: ServiceProcess;

beforeAll(async () => {
  database = await createDatabase('hostile');
  db = connect(database.name);
  svc = await startService({ DB_NAME: database.name });
});

afterAll(async () => {
  await stopAllServices();
  await db.destroy();
  await database.drop();
});

/** The operations the service documents, read from its own OpenAPI document. */
function operationsOf(doc: {
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

/** Bodies that are not what JSON parsers expect: deep, huge, broken, mis-encoded. */
const rawJsonBody: fc.Arbitrary<{ body: Buffer; label: string }> = fc.oneof(
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
const lookalikeEmail: fc.Arbitrary<string> = fc
  .tuple(
    fc.constantFrom('author@example.com', 'other@example.com'),
    fc.nat(),
    fc.constantFrom(
      'invisible',
      'full-width',
      'cyrillic',
      'greek',
      'case',
      'full-width-at',
      'punycode',
      'greek-all',
    ),
    fc.constantFrom(...INVISIBLES),
  )
  .map(([email, n, kind, invisible]) => {
    const at = n % email.length;
    switch (kind) {
      case 'invisible':
        return email.slice(0, at) + invisible + email.slice(at);
      case 'full-width':
        // Full-width Latin sits 0xFEE0 above ASCII; NFKC maps it back.
        return email.replace(/[a-z]/g, (ch, i: number) =>
          i <= at ? String.fromCharCode(ch.charCodeAt(0) + 0xfee0) : ch,
        );
      case 'cyrillic':
        return email.replace(/[aeopcxi]/, (ch) => CONFUSABLES[ch] ?? ch);
      case 'greek':
        return email.replace('o', '\u03BF');
      case 'case':
        return email.toUpperCase();
      case 'full-width-at':
        return email.replace('@', '\uFF20');
      case 'punycode':
        return email.replace('example.com', 'xn--xample-2of.com');
      default:
        return email.replace(/^[a-z]+/, '\u03B1\u03C5\u03C4\u03BF');
    }
  });

/** Content-Encoding on a body: valid, corrupt, truncated, stacked, unknown. */
interface Coding {
  header: string;
  encode(body: Buffer): Buffer;
  label: string;
  refused: boolean;
}
const codings: Coding[] = [
  { header: 'gzip', encode: (b) => zlib.gzipSync(b), label: 'gzip', refused: false },
  { header: 'deflate', encode: (b) => zlib.deflateSync(b), label: 'deflate', refused: false },
  { header: 'br', encode: (b) => zlib.brotliCompressSync(b), label: 'br', refused: false },
  { header: 'GZIP', encode: (b) => zlib.gzipSync(b), label: 'gzip-upper', refused: false },
  { header: 'identity', encode: (b) => b, label: 'identity', refused: false },
  { header: 'gzip', encode: (b) => b, label: 'gzip-corrupt', refused: true },
  { header: 'deflate', encode: (b) => b, label: 'deflate-corrupt', refused: true },
  {
    header: 'br',
    encode: (b) => Buffer.concat([Buffer.from([0xff]), b]),
    label: 'br-corrupt',
    refused: true,
  },
  { header: 'gzip', encode: (b) => zlib.gzipSync(b).subarray(0, 12), label: 'gzip-truncated', refused: true },
  {
    header: 'deflate',
    encode: (b) => zlib.deflateSync(b).subarray(0, 4),
    label: 'deflate-truncated',
    refused: true,
  },
  { header: 'gzip, gzip', encode: (b) => zlib.gzipSync(zlib.gzipSync(b)), label: 'stacked', refused: true },
  { header: 'identity, gzip', encode: (b) => zlib.gzipSync(b), label: 'stacked-identity', refused: true },
  { header: 'compress', encode: (b) => b, label: 'unknown', refused: true },
  { header: 'zstd', encode: (b) => b, label: 'zstd', refused: true },
  { header: 'x-gzip', encode: (b) => zlib.gzipSync(b), label: 'x-gzip', refused: true },
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
const expectation = fc.constantFrom('100-continue', '100-Continue', '200-ok', 'foo', '');

/** Requests Node's HTTP layer turns away (or would, left alone): each answered problem+json. */
const body = '{"email":"raw@example.com","password":"password123"}';
const protocolRequests: string[] = [
  'GET /posts/public HTTP/1.1\r\nConnection: close\r\n\r\n',
  'GET /healthz/ready HTTP/1.1\r\nConnection: close\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n',
  'GET /posts/public HTTP/1.1\r\nHost: a\r\nHost: a\r\nConnection: close\r\n\r\n',
  `POST /users/ HTTP/1.1\r\nHost: a\r\nhost: b\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
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
function claimTokens(userId: number): string[] {
  const now = Math.floor(Date.now() / 1000);
  const sign = (payload: Record<string, unknown>) => {
    const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const unsigned = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: String(userId), ...payload })}`;
    return `${unsigned}.${createHmac('sha256', SECRET).update(unsigned).digest('base64url')}`;
  };
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
  ];
}

function tokensFor(userId: number, valid: string): string[] {
  const now = Math.floor(Date.now() / 1000);
  const sign = (payload: object, secret = SECRET, algorithm: jwt.Algorithm = 'HS256') =>
    jwt.sign(payload, secret, { algorithm });
  const unsigned = (payload: object) =>
    `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.`;
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
    unsigned({ sub: String(userId) }),
    `${header}.${body}.`,
    `${header}.${body}.${'A'.repeat(43)}`,
    `${valid}x`,
    'abc.def.ghi',
    '...',
    'x'.repeat(4000),
    '',
  ];
}

type Answer = { status: number; headers: http.IncomingHttpHeaders; body: string };

/** One response read off raw bytes: status, headers, body (Content-Length, chunked or to the close). */
function parseRaw(text: string): (Answer & { complete: boolean }) | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
  const headers: http.IncomingHttpHeaders = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = text.slice(end + 4);
  let complete = false;
  const length = headers['content-length'];
  if (length !== undefined) {
    complete = Buffer.byteLength(body) >= Number(length);
  } else if (headers['transfer-encoding'] === 'chunked') {
    complete = body.endsWith('0\r\n\r\n');
    let decoded = '';
    for (let rest = body; ;) {
      const lineEnd = rest.indexOf('\r\n');
      const size = parseInt(rest.slice(0, lineEnd), 16);
      if (lineEnd < 0 || !(size > 0)) break;
      decoded += rest.slice(lineEnd + 2, lineEnd + 2 + size);
      rest = rest.slice(lineEnd + 2 + size + 2);
    }
    body = decoded;
  }
  return { status, headers, body, complete };
}

/** Raw bytes on a socket of their own; the answer once complete or once the server closes. */
function sendRaw(port: number, bytes: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      const answer = parseRaw(text);
      if (answer && answer.status > 0) resolve(answer);
      else reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
    };
    const timer = setTimeout(finish, 10_000);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (parseRaw(text)?.complete) finish();
    });
    socket.on('close', finish);
    socket.on('error', () => undefined);
    socket.on('connect', () => socket.write(bytes, 'latin1'));
  });
}

function request(port: number, r: HostileRequest, agent: http.Agent): Promise<Answer> {
  if (r.raw !== undefined) return sendRaw(port, r.raw);
  return new Promise((resolve, reject) => {
    // A declared length never sent goes on a socket of its own, closed after the answer.
    const headers = r.fresh ? { ...r.headers, Connection: 'close' } : r.headers;
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: r.method,
        path: r.path,
        headers,
        agent: r.fresh ? false : agent,
        // A refusal from the declared length alone comes at once; waiting for a body never sent is the bug.
        timeout: r.fresh ? 5_000 : 20_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks).toString(),
          });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(r.body);
  });
}

test('Hostile input: 5,000 generated requests across every endpoint, 0 answers ≥ 500, every refusal has a detail, nothing refused changed the database', async () => {
  const author = await account(svc.base, 'author@example.com');
  const other = await account(svc.base, 'other@example.com');
  const postIds = [...(await createPosts(svc.base, author, 4)), ...(await createPosts(svc.base, other, 2))];
  await call(svc.base, '/posts/', { token: other, json: { title: 'draft', content: 'c', published: false } });
  await call(svc.base, '/votes/', { token: other, json: { post_id: postIds[0], dir: 1 } });
  const authorId = (
    (await call(svc.base, `/posts/${String(postIds[0])}`, { token: author })).body as { user_id: number }
  ).user_id;

  const doc = (await call(svc.base, '/openapi.json')).body as Parameters<typeof operationsOf>[0];
  const ops = operationsOf(doc);
  const tokens = [...tokensFor(authorId, author), other];
  const authorization = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...tokens).map((t) => `Bearer ${t}`) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '',
        'Bearer',
        'Bearer  ',
        'Basic dXNlcjpwYXNz',
        `bearer ${author}`,
        `Bearer ${author} extra`,
        `Token ${author}`,
      ),
    },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );

  const documented: fc.Arbitrary<HostileRequest> = fc
    .constantFrom(...ops)
    .chain((op) =>
      fc.record({
        op: fc.constant(op),
        method: fc.oneof(
          { weight: 6, arbitrary: fc.constant(op.method) },
          { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS') },
        ),
        id: idSegment(postIds),
        query: queryString(op.params),
        oddity: pathOddity,
        auth: authorization,
        body: op.body
          ? op.body.type === 'json'
            ? fc.oneof(
                {
                  weight: 5,
                  arbitrary: objectValue(op.body.schema, postIds).map((o) => ({
                    body: Buffer.from(JSON.stringify(o)),
                    label: 'object',
                  })),
                },
                { weight: 2, arbitrary: rawJsonBody },
              )
            : objectValue(op.body.schema, postIds).chain((o) =>
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
                ),
              )
          : fc.option(rawJsonBody, { nil: undefined }),
        contentType: fc.oneof(
          { weight: 6, arbitrary: fc.constant(undefined) },
          { weight: 2, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
          { weight: 1, arbitrary: fc.constant('none') },
        ),
        chunked: fc.boolean(),
        // The families of issue 11, each on a share of the requests.
        claim: fc.oneof(
          { weight: 6, arbitrary: fc.constant(undefined) },
          { weight: 1, arbitrary: fc.constantFrom(...claimTokens(authorId)) },
        ),
        coding: fc.oneof(
          { weight: 5, arbitrary: fc.constant(undefined) },
          { weight: 2, arbitrary: fc.constantFrom(...codings) },
        ),
        params: fc.oneof(
          { weight: 5, arbitrary: fc.constant(undefined) },
          { weight: 2, arbitrary: typeParameters },
        ),
        length: fc.oneof(
          { weight: 10, arbitrary: fc.constant(undefined) },
          { weight: 1, arbitrary: declaredLength },
        ),
        expect: fc.oneof(
          { weight: 10, arbitrary: fc.constant(undefined) },
          { weight: 1, arbitrary: expectation },
        ),
      }),
    )
    .map(
      ({
        op,
        method,
        id,
        query,
        oddity,
        auth,
        body,
        contentType,
        chunked,
        claim,
        coding,
        params,
        length,
        expect,
      }) => {
        const path = oddity(op.path.replace('{id}', id)) + (query ? `?${query}` : '');
        const headers: Record<string, string> = {};
        const families: string[] = [];
        let mustRefuse: string | undefined;
        let expectStatus: number[] | undefined;
        let fresh = false;
        // The documented operation itself (its method, its body), which a refusal must come from.
        const reads = method === op.method && op.body !== undefined;
        if (auth !== undefined) headers.Authorization = auth;
        if (claim !== undefined) {
          headers.Authorization = `Bearer ${claim}`;
          families.push('claims');
          if (op.secured && method === op.method && id !== 'public') mustRefuse = 'its token has bad claims';
        }
        let bytes = body?.body;
        if (body && bytes) {
          const natural = op.body?.type === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
          if (contentType === undefined && params) {
            families.push('charset');
            if (params.refused && reads) mustRefuse ??= `it is ${natural}${params.params}`;
          }
          if (contentType !== 'none')
            headers['Content-Type'] = contentType ?? natural + (params?.params ?? '');
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
            bytes = undefined;
            fresh = true;
            families.push('length');
            if (reads) mustRefuse ??= `it declares ${String(length)} bytes`;
          } else if (chunked) headers['Transfer-Encoding'] = 'chunked';
          else headers['Content-Length'] = String(bytes.length);
        }
        if (expect !== undefined) {
          headers.Expect = expect;
          families.push('expect');
          if (!/^100-continue$/i.test(expect)) expectStatus = [417];
        }
        return {
          method,
          path,
          headers,
          body: bytes,
          label: `${op.method} ${op.path} ${[body?.label, ...families].filter(Boolean).join(' ')}`.trim(),
          families,
          mustRefuse,
          expectStatus,
          fresh,
        };
      },
    );

  const undocumented: fc.Arbitrary<HostileRequest> = fc
    .record({
      path: wildPath,
      method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH'),
      auth: authorization,
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

  const hostile = fc.oneof(
    { weight: 9, arbitrary: documented },
    { weight: 1, arbitrary: undocumented },
    { weight: 1, arbitrary: healthRequest },
    { weight: 1, arbitrary: protocol },
  );
  const families: Record<string, number> = {};

  // A digest of every row: a refused request must leave it as it was.
  const digest = async (): Promise<string> =>
    JSON.stringify(
      (
        await db.raw<{ rows: unknown[] }>(
          `SELECT (SELECT count(*) || ':' || coalesce(sum(hashtext(u::text)), 0) FROM users u) AS users,
                  (SELECT count(*) || ':' || coalesce(sum(hashtext(p::text)), 0) FROM posts p) AS posts,
                  (SELECT count(*) || ':' || coalesce(sum(hashtext(v::text)), 0) FROM votes v) AS votes`,
        )
      ).rows[0],
    );

  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const statuses: Record<number, number> = {};
  const violations: string[] = [];
  let sent = 0;
  let transportErrors = 0;
  let before = await digest();
  const started = Date.now();
  const describe = (r: HostileRequest) =>
    `${r.method} ${r.path.slice(0, 200)} [${r.label}] ${JSON.stringify(r.headers).slice(0, 200)} body=${r.body?.subarray(0, 120).toString() ?? ''}`;

  await fc.assert(
    fc.asyncProperty(hostile, async (r) => {
      // 50 violations say enough; the rest of the run would only add time (a hanging family costs seconds each).
      if (violations.length >= 50) return;
      sent += 1;
      for (const family of r.families ?? []) families[family] = (families[family] ?? 0) + 1;
      let res: Awaited<ReturnType<typeof request>>;
      try {
        res = await request(svc.port, r, agent);
      } catch (error) {
        transportErrors += 1;
        violations.push(`transport error ${String(error)}: ${describe(r)}`);
        before = await digest();
        return;
      }
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      const after = await digest();
      const problems: string[] = [];
      if (res.status >= 500) problems.push(`status ${String(res.status)}`);
      if (r.mustRefuse && res.status < 400) problems.push(`accepted although ${r.mustRefuse}`);
      if (r.expectStatus && !r.expectStatus.includes(res.status))
        problems.push(`status ${String(res.status)}, expected ${r.expectStatus.join(' or ')}`);
      if (res.headers['set-cookie']) problems.push('Set-Cookie');
      if (/\n\s+at |node_modules|knex|syntax error at/i.test(res.body)) problems.push('internals leaked');
      if (res.status >= 400) {
        let detail: unknown;
        let status: unknown;
        try {
          ({ detail, status } = JSON.parse(res.body) as { detail?: unknown; status?: unknown });
        } catch {
          detail = undefined;
        }
        if (!String(res.headers['content-type']).startsWith('application/problem+json'))
          problems.push('not problem+json');
        if (typeof detail !== 'string' || detail === '') problems.push('no detail');
        if (status !== res.status) problems.push('status field differs');
        if (after !== before) problems.push('a refused request changed the database');
      }
      if (problems.length > 0 && violations.length < 50)
        violations.push(
          `${problems.join(', ')} → ${String(res.status)} ${res.body.slice(0, 200)}: ${describe(r)}`,
        );
      before = after;
    }),
    { seed: SEED, numRuns: RUNS, endOnFailure: true },
  );
  agent.destroy();

  const live = (await call(svc.base, '/healthz/live')).status;
  const ready = (await call(svc.base, '/healthz/ready')).status;
  // Every stored address is in the e-mail policy's normalised form, and no two are one mailbox.
  const emails = await db<{ email: string }>('users').pluck('email');
  const notNormalised = emails.filter((email) => {
    const result = normaliseEmail(email);
    return !result.ok || result.email !== email;
  });
  const sameMailbox = emails.length - new Set(emails.map((email) => email.toLowerCase())).size;
  report('hostile input', {
    seed: SEED,
    requests: sent,
    operations: ops.length,
    statuses: Object.entries(statuses)
      .map(([s, n]) => `${s}x${String(n)}`)
      .join(','),
    answers5xx: Object.entries(statuses)
      .filter(([s]) => Number(s) >= 500)
      .reduce((n, [, c]) => n + c, 0),
    violations: violations.length,
    transportErrors,
    seconds: Math.round((Date.now() - started) / 1000),
    live,
    ready,
    families: Object.entries(families)
      .map(([f, n]) => `${f}x${String(n)}`)
      .join(','),
    users: emails.length,
  });
  for (const family of FAMILIES)
    expect(`${family}: ${String(families[family] ?? 0)}`).not.toBe(`${family}: 0`);
  expect(notNormalised).toEqual([]);
  expect(sameMailbox).toBe(0);
  // The violations first: a run cut short after 50 of them fails here, with the list to read.
  expect(violations).toEqual([]);
  expect(sent).toBeGreaterThanOrEqual(RUNS);
  expect(live).toBe(200);
  expect(ready).toBe(200);
  expect(svc.child.exitCode).toBeNull();
});
