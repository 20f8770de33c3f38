import http from 'node:http';
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

const SEED = 20261121;
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
}

interface HostileRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  label: string;
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
      };
      const content = op.requestBody?.content ?? {};
      const json = content['application/json'];
      const form = content['application/x-www-form-urlencoded'];
      ops.push({
        method: method.toUpperCase(),
        path,
        params: [...shared, ...(op.parameters ?? []).map(resolveParam)],
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
      if (schema.format === 'email') return fc.emailAddress();
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

function request(
  port: number,
  r: HostileRequest,
  agent: http.Agent,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method: r.method, path: r.path, headers: r.headers, agent, timeout: 20_000 },
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
      }),
    )
    .map(({ op, method, id, query, oddity, auth, body, contentType, chunked }) => {
      const path = oddity(op.path.replace('{id}', id)) + (query ? `?${query}` : '');
      const headers: Record<string, string> = {};
      if (auth !== undefined) headers.Authorization = auth;
      if (body) {
        const natural = op.body?.type === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
        if (contentType !== 'none') headers['Content-Type'] = contentType ?? natural;
        if (chunked) headers['Transfer-Encoding'] = 'chunked';
        else headers['Content-Length'] = String(body.body.length);
      }
      return {
        method,
        path,
        headers,
        body: body?.body,
        label: `${op.method} ${op.path} ${body?.label ?? ''}`.trim(),
      };
    });

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

  const hostile = fc.oneof({ weight: 9, arbitrary: documented }, { weight: 1, arbitrary: undocumented });

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
      sent += 1;
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
  });
  expect(sent).toBeGreaterThanOrEqual(RUNS);
  expect(violations).toEqual([]);
  expect(live).toBe(200);
  expect(ready).toBe(200);
  expect(svc.child.exitCode).toBeNull();
});
