import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { buffer, text } from 'node:stream/consumers';
import protobuf from 'protobufjs';
import { call, login, sleep } from '../../tools/harness/client';
import { pollUntil } from '../../tools/harness/poll';
import { postgresServer } from '../../tools/harness/postgres';
import { Relay } from '../../tools/harness/relay';
import { startService, stopAll, type ServiceProcess } from '../../tools/harness/service';
import { describeSettings, loadSettings } from '../../service/src/settings';
import { bearer, describeOnPostgres, migratedDatabaseEnv, testEnv } from './helpers';

/**
 * Traces over the wire: the service runs as its own process and exports to a collector made here,
 * which decodes what arrives as an OTLP/HTTP collector does (protobuf or JSON), not an SDK's memory.
 */

/** The part of OTLP's ExportTraceServiceRequest these tests read, by the field numbers of its .proto. */
const otlp = protobuf.Root.fromJSON({
  nested: {
    ExportTraceServiceRequest: {
      fields: { resourceSpans: { rule: 'repeated', type: 'ResourceSpans', id: 1 } },
    },
    ResourceSpans: {
      fields: {
        resource: { type: 'Resource', id: 1 },
        scopeSpans: { rule: 'repeated', type: 'ScopeSpans', id: 2 },
      },
    },
    Resource: { fields: { attributes: { rule: 'repeated', type: 'KeyValue', id: 1 } } },
    ScopeSpans: { fields: { spans: { rule: 'repeated', type: 'Span', id: 2 } } },
    Span: {
      fields: {
        traceId: { type: 'bytes', id: 1 },
        spanId: { type: 'bytes', id: 2 },
        parentSpanId: { type: 'bytes', id: 4 },
        name: { type: 'string', id: 5 },
        kind: { type: 'int32', id: 6 },
        attributes: { rule: 'repeated', type: 'KeyValue', id: 9 },
        status: { type: 'Status', id: 15 },
      },
    },
    KeyValue: { fields: { key: { type: 'string', id: 1 }, value: { type: 'AnyValue', id: 2 } } },
    AnyValue: {
      fields: {
        stringValue: { type: 'string', id: 1 },
        boolValue: { type: 'bool', id: 2 },
        intValue: { type: 'int64', id: 3 },
        doubleValue: { type: 'double', id: 4 },
      },
    },
    Status: { fields: { code: { type: 'int32', id: 3 } } },
  },
}).lookupType('ExportTraceServiceRequest');

/** OTLP's span kinds and status codes, as numbers in both encodings. */
const SERVER = 2;
const CLIENT = 3;
const STATUS_ERROR = 2;

interface WireKeyValue {
  key: string;
  value?: { stringValue?: string; boolValue?: boolean; intValue?: number | string; doubleValue?: number };
}

interface WireSpan {
  traceId?: string | Uint8Array;
  spanId?: string | Uint8Array;
  parentSpanId?: string | Uint8Array;
  name: string;
  kind?: number;
  attributes?: WireKeyValue[];
  status?: { code?: number };
}

interface WireRequest {
  resourceSpans?: {
    resource?: { attributes?: WireKeyValue[] };
    scopeSpans?: { spans?: WireSpan[] }[];
  }[];
}

const hex = (id: string | Uint8Array | undefined): string =>
  id === undefined ? '' : typeof id === 'string' ? id : Buffer.from(id).toString('hex');

const valuesOf = (attributes: WireKeyValue[] = []): Record<string, unknown> =>
  Object.fromEntries(
    attributes.map(({ key, value = {} }) => [
      key,
      value.stringValue ??
        value.boolValue ??
        (value.intValue === undefined ? value.doubleValue : Number(value.intValue)),
    ]),
  );

/** A span as the cases read it: ids in hex, attributes as plain values, beside its resource's. */
const exported = (span: WireSpan, resource: { attributes?: WireKeyValue[] } = {}) => ({
  traceId: hex(span.traceId),
  spanId: hex(span.spanId),
  parentSpanId: hex(span.parentSpanId),
  name: span.name,
  kind: span.kind ?? 0,
  attributes: valuesOf(span.attributes),
  status: { code: span.status?.code ?? 0 },
  resource: valuesOf(resource.attributes),
});
type ExportedSpan = ReturnType<typeof exported>;

/** An OTLP/HTTP collector: every span it receives, with the encodings the requests came in. */
class Collector {
  readonly spans: ExportedSpan[] = [];
  readonly contentTypes = new Set<string>();
  /** Every body as it arrived, undecoded: what a collector stores includes what the decoding above leaves out. */
  readonly bodies: string[] = [];
  private server: Server | undefined;
  endpoint = '';

  async start(): Promise<void> {
    const server = createServer((req, res) => {
      void buffer(req).then((body) => {
        const type = req.headers['content-type'] ?? '';
        this.contentTypes.add(type);
        this.bodies.push(body.toString('utf8'));
        if (req.url !== '/v1/traces') {
          res.writeHead(404).end();
          return;
        }
        const decoded = (
          type.startsWith('application/json')
            ? JSON.parse(body.toString('utf8'))
            : otlp.toObject(otlp.decode(body), { longs: Number, defaults: false })
        ) as WireRequest;
        this.take(decoded);
        res.writeHead(200, { 'content-type': type }).end(type.startsWith('application/json') ? '{}' : '');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.server = server;
    this.endpoint = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
  }

  private take(request: WireRequest): void {
    for (const { resource, scopeSpans = [] } of request.resourceSpans ?? [])
      for (const { spans = [] } of scopeSpans)
        this.spans.push(...spans.map((span) => exported(span, resource)));
  }

  /** The spans of one trace, once its server span (the last to end) has arrived. */
  async trace(traceId: string): Promise<ExportedSpan[]> {
    const { value } = await pollUntil(
      () => this.spans.filter((s) => s.traceId === traceId),
      (spans) => spans.some((s) => s.kind === SERVER),
      // The batch goes out every OTEL_BSP_SCHEDULE_DELAY (startTraced's); the SDK's default is 5 s.
      { withinMs: 20_000, everyMs: 50 },
    );
    return value;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (server) await new Promise((resolve) => server.close(resolve));
  }
}

const newTraceId = () => randomBytes(16).toString('hex');
const newSpanId = () => randomBytes(8).toString('hex');
/** A caller's traceparent in `traceId`, sampled unless `flags` says otherwise. */
const traceparent = (traceId: string, flags = '01') => `00-${traceId}-${newSpanId()}-${flags}`;

/** The span and every span under it, in the trace. */
function descendants(spans: ExportedSpan[], root: ExportedSpan): ExportedSpan[] {
  const under = spans.filter((s) => s.parentSpanId === root.spanId);
  return under.flatMap((child) => [child, ...descendants(spans, child)]);
}

/** The one server span of a trace (the request's). */
function serverSpan(spans: ExportedSpan[]): ExportedSpan {
  const servers = spans.filter((s) => s.kind === SERVER);
  expect(servers).toHaveLength(1);
  return servers[0] as ExportedSpan;
}

type Traced = ServiceProcess & { drop(): Promise<void> };

async function startTraced(
  collector: Pick<Collector, 'endpoint'>,
  overrides: Record<string, string> = {},
): Promise<Traced> {
  const fresh = await migratedDatabaseEnv();
  const svc = await startService(
    testEnv({
      ...fresh.env,
      PORT: '0',
      LOG_LEVEL: 'info',
      SHUTDOWN_DELAY_SECONDS: '0',
      // The test plays the proxy: the request id it sends is taken, as a trusted proxy's is.
      TRUSTED_PROXIES: '127.0.0.1',
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
      OTEL_RESOURCE_ATTRIBUTES: 'k8s.namespace.name=tests,deployment.environment.name=ci',
      OTEL_BSP_SCHEDULE_DELAY: '200',
      ...overrides,
    }),
  );
  return { ...svc, drop: () => fresh.drop() };
}

/** A collector and a service tracing to it, for a describe's cases; both go after its last. */
function tracedFixture(overrides: Record<string, string>): { collector: Collector; svc: Traced } {
  const collector = new Collector();
  const svc = {} as Traced;
  beforeAll(async () => {
    await collector.start();
    Object.assign(svc, await startTraced(collector, overrides));
  }, 120_000);
  afterAll(async () => {
    // Only what was started is stopped: a failed start has already said why.
    if ('stop' in svc) await svc.stop();
    if ('drop' in svc) await svc.drop();
    await collector.close();
  });
  return { collector, svc };
}

afterAll(() => stopAll());

describe.each([
  ['http/protobuf', 'application/x-protobuf'],
  ['http/json', 'application/json'],
])('Tracing exported as %s', (protocol, contentType) => {
  const { collector, svc } = tracedFixture({ OTEL_EXPORTER_OTLP_PROTOCOL: protocol });

  test("When a request comes with a traceparent, then its trace has the caller's span as the root's parent, the route span under it, one span per statement, and its log lines carry the trace id", async () => {
    const traceId = newTraceId();
    const callerSpan = newSpanId();
    const answer = await fetch(`${svc.base}/posts/public?limit=5`, {
      headers: { traceparent: `00-${traceId}-${callerSpan}-01`, tracestate: 'proxy=yes' },
    });
    expect(answer.status).toBe(200);

    const spans = await collector.trace(traceId);
    expect([...collector.contentTypes]).toEqual([contentType]);
    const root = serverSpan(spans);
    expect(root.parentSpanId).toBe(callerSpan);
    expect(root.name).toBe('GET /posts/public');
    expect(root.attributes).toMatchObject({
      'http.route': '/posts/public',
      'http.request.method': 'GET',
      'http.response.status_code': 200,
      'url.path': '/posts/public',
      'url.scheme': 'http',
      'server.address': '127.0.0.1',
      'server.port': svc.port,
    });
    // The query string (a search's words) is not recorded.
    expect(Object.values(root.attributes).filter((v) => String(v).includes('limit='))).toEqual([]);
    expect(root.resource).toMatchObject({
      'service.name': 'social-posts',
      'k8s.namespace.name': 'tests',
      'deployment.environment.name': 'ci',
    });
    // Every span of the trace hangs from the request's.
    expect(descendants(spans, root)).toHaveLength(spans.length - 1);

    const route = spans.filter((s) => s.parentSpanId === root.spanId && s.attributes['http.route']);
    expect(route.map((s) => s.attributes['http.route'])).toEqual(['/posts/public']);

    // The public list is one statement, named as prepared, with no value of it in any attribute.
    const statements = spans.filter((s) => s.kind === CLIENT);
    expect(statements.map((s) => s.name)).toEqual(['posts_public']);
    expect(statements[0]?.attributes).toEqual({
      'db.system.name': 'postgresql',
      'db.query.summary': 'posts_public',
    });
    expect(descendants(spans, route[0] as ExportedSpan)).toContainEqual(statements[0]);
    // The wait for its pooled connection, beside it.
    expect(spans.filter((s) => s.name === 'db pool wait')).toHaveLength(1);

    const logged = svc.lines.filter((line) => line.msg === 'request completed' && line.trace_id === traceId);
    expect(logged).toHaveLength(1);
    expect(spans.map((s) => s.spanId)).toContain(logged[0]?.span_id);
  });

  test('When a route answers under two spellings, then its spans carry the one the contract names', async () => {
    const traceId = newTraceId();
    const answer = await fetch(`${svc.base}/posts`, { headers: { traceparent: traceparent(traceId) } });
    expect(answer.status).toBe(401);
    const root = serverSpan(await collector.trace(traceId));
    expect(root.name).toBe('GET /posts/');
    expect(root.attributes['http.route']).toBe('/posts/');
  });

  test("When a request's body arrives after its head, then the statements its handler sends after reading it are in the request's trace", async () => {
    const traceId = newTraceId();
    const body = new URLSearchParams({
      username: 'nobody@example.com',
      password: 'not a password here',
    }).toString();
    // The body in a later packet than the head: its events then come from the socket, outside the request.
    const socket = connect(svc.port, '127.0.0.1');
    await once(socket, 'connect');
    const answer = text(socket);
    socket.write(
      [
        'POST /login HTTP/1.1',
        'Host: 127.0.0.1',
        `traceparent: ${traceparent(traceId)}`,
        'Content-Type: application/x-www-form-urlencoded',
        `Content-Length: ${String(body.length)}`,
        'Connection: close',
        '',
        '',
      ].join('\r\n'),
    );
    await sleep(200);
    socket.write(body);
    expect(await answer).toMatch(/^HTTP\/1\.1 403 /);

    const spans = await collector.trace(traceId);
    const root = serverSpan(spans);
    expect(root.name).toBe('POST /login');
    expect(root.attributes['http.response.status_code']).toBe(403);
    // A 4xx is the caller's: the server's span is no error.
    expect(root.status.code).not.toBe(STATUS_ERROR);
    const statements = spans.filter((s) => s.kind === CLIENT);
    expect(statements.map((s) => s.name)).toEqual(['user_by_email']);
    expect(descendants(spans, root)).toEqual(expect.arrayContaining(statements));
  });

  test('When the client closes the connection before the answer, then the request span says 499, as the request log does, not a status never sent', async () => {
    const traceId = newTraceId();
    const requestId = `closed-early-${protocol.replace('/', '-')}`;
    const socket = connect(svc.port, '127.0.0.1');
    await once(socket, 'connect');
    // A head that announces a body, and half of it: the client is gone before the answer.
    socket.write(
      [
        'POST /users/ HTTP/1.1',
        'Host: 127.0.0.1',
        `traceparent: ${traceparent(traceId)}`,
        `X-Request-Id: ${requestId}`,
        'Content-Type: application/json',
        'Content-Length: 100',
        '',
        '{"email":',
      ].join('\r\n'),
    );
    await sleep(200);
    socket.destroy();
    const root = serverSpan(await collector.trace(traceId));
    const line = await pollUntil(
      () => svc.lines.find((l) => (l.req as { id?: string } | undefined)?.id === requestId && 'res' in l),
      (found) => found !== undefined,
      { withinMs: 5000, everyMs: 50 },
    );
    expect((line.value?.res as { status?: number } | undefined)?.status).toBe(499);
    expect(root.attributes['http.response.status_code']).toBe(499);
  });

  test("When a handler's statements are built by knex (an insert, a transaction), then each is a span named by its operation and table, with none of its values", async () => {
    const email = `traced-${protocol.replace('/', '-')}@example.com`;
    const password = 'a traced password';
    const registerTrace = newTraceId();
    const registered = await fetch(`${svc.base}/users/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: traceparent(registerTrace) },
      body: JSON.stringify({ email, password }),
    });
    expect(registered.status).toBe(201);
    const insert = (await collector.trace(registerTrace)).filter((s) => s.kind === CLIENT);
    expect(insert.map((s) => s.name)).toEqual(['INSERT users']);
    expect(insert[0]?.attributes).toEqual({
      'db.system.name': 'postgresql',
      'db.query.summary': 'INSERT users',
    });

    const token = await login(svc.base, email, password);
    const created = await call(svc.base, '/posts/', {
      token,
      json: { title: 'traced', content: 'a secret word: marmalade' },
    });
    const { id } = created.body as { id: number };
    const updateTrace = newTraceId();
    const updated = await fetch(`${svc.base}/posts/${String(id)}`, {
      method: 'PUT',
      // A conditional change: its check and the update run in one transaction.
      headers: {
        ...bearer(token),
        'content-type': 'application/json',
        'if-match': created.headers.get('etag') ?? '',
        traceparent: traceparent(updateTrace),
      },
      body: JSON.stringify({ title: 'traced again', content: 'another secret word: quince' }),
    });
    expect(updated.status).toBe(200);
    const spans = await collector.trace(updateTrace);
    const root = serverSpan(spans);
    const statements = spans.filter((s) => s.kind === CLIENT);
    // The look-up is a prepared statement; the transaction's, knex's, follow in the order they ran:
    // the lock, the check's read, and the update that reads the post it answers with.
    expect(statements.map((s) => s.name)).toEqual([
      'user_by_id',
      'BEGIN',
      'SELECT posts',
      'WITH posts',
      'UPDATE posts',
      'COMMIT',
    ]);
    expect(descendants(spans, root)).toEqual(expect.arrayContaining(statements));
    const recorded = JSON.stringify(spans);
    for (const value of [email, password, 'quince', 'traced again']) expect(recorded).not.toContain(value);
  });

  test("When a statement knex sends fails (a registration of an address taken), then its error span says why with the statement's placeholders, none of its values", async () => {
    const email = `taken-${protocol.replace('/', '-')}@example.com`;
    const password = 'a password nobody may read';
    expect((await call(svc.base, '/users/', { json: { email, password } })).status).toBe(201);
    const traceId = newTraceId();
    const again = await fetch(`${svc.base}/users/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: traceparent(traceId) },
      body: JSON.stringify({ email, password }),
    });
    expect(again.status).toBe(409);
    const insert = (await collector.trace(traceId)).filter((s) => s.name === 'INSERT users');
    expect(insert.map((s) => s.status.code)).toEqual([STATUS_ERROR]);
    // The exception event and the status message, which the decoding above leaves out, are in the bodies.
    const received = collector.bodies.join('\n');
    expect(received).toContain('duplicate key value violates unique constraint');
    expect(received).toContain('values ($1, $2)');
    for (const secret of [email, '$2b$']) expect(received).not.toContain(secret);
  });

  test('When the traceparent is malformed, then it is ignored: the request is answered and starts a trace of its own', async () => {
    const requestId = `bad-parent-${protocol.replace('/', '-')}`;
    const answer = await fetch(`${svc.base}/posts/public`, {
      headers: { traceparent: traceparent('zz'.repeat(16)), 'x-request-id': requestId },
    });
    expect(answer.status).toBe(200);
    const line = await pollUntil(
      () => svc.lines.find((l) => (l.req as { id?: string } | undefined)?.id === requestId),
      (found) => found !== undefined,
      { withinMs: 5000, everyMs: 50 },
    );
    expect(line.held).toBe(true);
    const traceId = String(line.value?.trace_id);
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    const root = serverSpan(await collector.trace(traceId));
    expect(root.parentSpanId).toBe('');
    expect(root.attributes['http.response.status_code']).toBe(200);
  });

  test('When a traced request has no Host, then it is answered as an untraced one is: an HTTP/1.0 request served, an HTTP/1.1 one refused with 400', async () => {
    const ask = async (version: string) => {
      const socket = connect(svc.port, '127.0.0.1');
      await once(socket, 'connect');
      const answer = text(socket);
      socket.write(`GET /posts/public HTTP/${version}\r\ntraceparent: ${traceparent(newTraceId())}\r\n\r\n`);
      return answer;
    };
    expect(await ask('1.0')).toMatch(/^HTTP\/1\.1 200 /);
    const refused = await ask('1.1');
    expect(refused).toMatch(/^HTTP\/1\.1 400 /);
    expect(refused).toMatch(/Host/);
  });

  test("When a caller's user agent is longer than a span keeps, then its attribute is the value's first 1024 characters", async () => {
    const traceId = newTraceId();
    const agent = `agent/${'x'.repeat(8000)}`;
    const answer = await fetch(`${svc.base}/posts/public`, {
      headers: { traceparent: traceparent(traceId), 'user-agent': agent },
    });
    expect(answer.status).toBe(200);
    const root = serverSpan(await collector.trace(traceId));
    expect(root.attributes['user_agent.original']).toBe(agent.slice(0, 1024));
  });

  test('When requests come pipelined on one connection, then each is traced and logged in its own trace, its statements under its own span', async () => {
    const traceIds = [newTraceId(), newTraceId(), newTraceId()];
    const socket = connect(svc.port, '127.0.0.1');
    await once(socket, 'connect');
    const answers = text(socket);
    // All in one write: the later requests wait for the earlier answers, and go on from them.
    socket.write(
      traceIds
        .map(
          (traceId, i) =>
            `GET /posts/public?limit=${String(i + 1)} HTTP/1.1\r\nHost: 127.0.0.1\r\ntraceparent: ${traceparent(traceId)}\r\n` +
            (i === traceIds.length - 1 ? 'Connection: close\r\n' : '') +
            '\r\n',
        )
        .join(''),
    );
    expect((await answers).match(/HTTP\/1\.1 200 /g)).toHaveLength(3);
    for (const traceId of traceIds) {
      const spans = await collector.trace(traceId);
      const root = serverSpan(spans);
      const statements = spans.filter((s) => s.kind === CLIENT);
      expect(statements.map((s) => s.name)).toEqual(['posts_public']);
      expect(descendants(spans, root)).toEqual(expect.arrayContaining(statements));
      const logged = svc.lines.filter(
        (line) => line.msg === 'request completed' && line.trace_id === traceId,
      );
      expect(logged).toHaveLength(1);
    }
  });
});

describe("The collector's URL", () => {
  test('When its port is past 65535, which Node cannot read, then the settings refuse it naming the setting, without its value', () => {
    expect(() =>
      loadSettings(
        testEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://trace-user:s3cret-token@collector:99999' }),
      ),
    ).toThrow(
      /^Invalid setting OTEL_EXPORTER_OTLP_ENDPOINT: is not a URL Node can read: check its host and port$/,
    );
  });

  test("When the endpoint's URL carries a user and password, then the settings as logged name the collector and leave both out", () => {
    const settings = loadSettings(
      testEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://trace-user:s3cret-token@collector.example:4318' }),
    );
    const described = describeSettings(settings);
    expect(described.tracing).toMatchObject({ endpoint: 'https://collector.example:4318/' });
    expect(JSON.stringify(described)).not.toMatch(/trace-user|s3cret-token/);
  });
});

describe('Tracing at shutdown', () => {
  test.each([
    ['refuses connections', 'closed'],
    ['accepts connections and never answers', 'silent'],
    ['answers a byte at a time and never ends', 'trickling'],
    ['answers a batch sent before the signal a byte at a time', 'sent before'],
  ])(
    'When the collector %s, then a SIGTERM still shuts down in full within OTEL_EXPORTER_OTLP_TIMEOUT and exits 0, the lost spans logged',
    async (_how, kind) => {
      let received = 0;
      // A trickle keeps the connection busy, which the exporter's own time-out does not count as waiting.
      const silent = createServer((_req, res) => {
        received += 1;
        if (kind === 'closed' || kind === 'silent') return;
        res.writeHead(200, { 'content-type': 'application/x-protobuf' });
        const trickle = setInterval(() => res.write('\n'), 200);
        res.once('close', () => {
          clearInterval(trickle);
        });
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const { port } = silent.address() as AddressInfo;
      if (kind === 'closed') await new Promise((resolve) => silent.close(resolve));
      const collector = { endpoint: `http://127.0.0.1:${String(port)}` };
      // The exporter's own time-out bounds the wait on a collector that never answers.
      const svc = await startTraced(collector, {
        // Held for the shutdown, or sent at once and still on its way when the signal comes.
        OTEL_BSP_SCHEDULE_DELAY: kind === 'sent before' ? '1' : '60000',
        OTEL_EXPORTER_OTLP_TIMEOUT: '1000',
      });
      try {
        const answer = await fetch(`${svc.base}/posts/public`, {
          headers: { traceparent: traceparent(newTraceId()) },
        });
        expect(answer.status).toBe(200);
        if (kind === 'sent before') {
          const sent = await pollUntil(
            () => received,
            (count) => count > 0,
            { withinMs: 10_000, everyMs: 20 },
          );
          expect(sent.held).toBe(true);
        }
        const signalled = Date.now();
        expect(await svc.stop('SIGTERM')).toBe(0);
        // The time-out and the rest of the shutdown, far from the batch processor's own default.
        expect(Date.now() - signalled).toBeLessThan(10_000);
        expect(svc.lines.map((line) => line.msg)).toEqual(
          expect.arrayContaining([
            'the last spans could not be exported: they are lost',
            'shutdown complete',
          ]),
        );
      } finally {
        await svc.stop();
        await svc.drop();
        silent.closeAllConnections();
        if (kind !== 'closed') await new Promise((resolve) => silent.close(resolve));
      }
    },
    60_000,
  );
});

describe('Sampling', () => {
  const { collector, svc } = tracedFixture({
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.5',
  });

  test('When one request in two is sampled, then about half the requests without a caller are traced, in whole, none whose caller did not sample, and every one whose caller did', async () => {
    const get = async (parent?: string) => {
      const answer = await fetch(`${svc.base}/posts/public?limit=2`, {
        headers: parent === undefined ? {} : { traceparent: parent },
      });
      expect(answer.status).toBe(200);
    };
    const declinedByCaller = Array.from({ length: 20 }, () => newTraceId());
    for (const traceId of declinedByCaller) await get(traceparent(traceId, '00'));
    const requests = 200;
    for (let i = 0; i < requests; i++) await get();
    const sampledByCaller = Array.from({ length: 5 }, () => newTraceId());
    for (const traceId of sampledByCaller) await get(traceparent(traceId));

    // Spans are exported in the order they end: once the last request's trace is in, all are.
    await collector.trace(sampledByCaller.at(-1) as string);
    const servers = collector.spans.filter((s) => s.kind === SERVER);
    const traced = new Set(servers.map((s) => s.traceId));
    expect(declinedByCaller.filter((id) => traced.has(id))).toEqual([]);
    expect(sampledByCaller.filter((id) => traced.has(id))).toEqual(sampledByCaller);
    // Ratio 0.5 of 200: 100 expected; outside 70 to 130 is over four standard deviations away, and
    // a ratio applied twice (at the door and again by the SDK) would keep about 50.
    const ownRoots = servers.filter((s) => s.parentSpanId === '').length;
    expect(ownRoots).toBeGreaterThanOrEqual(70);
    expect(ownRoots).toBeLessThanOrEqual(130);
    // A traced request is traced in whole: its statement span came with it.
    for (const traceId of traced) {
      expect(
        collector.spans.filter((s) => s.traceId === traceId && s.kind === CLIENT).length,
      ).toBeGreaterThan(0);
    }
  }, 60_000);
});

describeOnPostgres('Tracing a database fault', () => {
  test("When the database stops answering, then the span of the request's wait for a connection and the request span are errors, the request with the problem status", async () => {
    const collector = new Collector();
    await collector.start();
    const relay = new Relay(postgresServer.port, postgresServer.host);
    await relay.start();
    const svc = await startTraced(collector, {
      DB_HOSTNAME: '127.0.0.1',
      DB_PORT: String(relay.port),
      DB_STATEMENT_TIMEOUT_MS: '500',
    });
    try {
      relay.stall();
      const traceId = newTraceId();
      const answer = await fetch(`${svc.base}/posts/public`, {
        headers: { traceparent: traceparent(traceId) },
      });
      expect(answer.status).toBe(503);
      expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);

      const spans = await collector.trace(traceId);
      const root = serverSpan(spans);
      expect(root.attributes['http.response.status_code']).toBe(503);
      expect(root.status.code).toBe(STATUS_ERROR);
      const waits = spans.filter((s) => s.name === 'db pool wait');
      expect(waits.map((s) => s.status.code)).toEqual([STATUS_ERROR]);
      // A statement sent before the database stopped would say so too.
      expect(spans.filter((s) => s.kind === CLIENT && s.status.code !== STATUS_ERROR)).toEqual([]);
    } finally {
      await svc.stop();
      await relay.close();
      await svc.drop();
      await collector.close();
    }
  }, 120_000);
});
