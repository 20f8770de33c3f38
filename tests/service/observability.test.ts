import { request as httpRequest } from 'node:http';
import { once } from 'node:events';
import { connect as tcpConnect, type Socket } from 'node:net';
import express from 'express';
import request from 'supertest';
import { errorHandler } from '../../service/src/http/errors';
import { trustProxies } from '../../service/src/http/proxies';
import { requestLog } from '../../service/src/http/request-log';
import { knownMigrations, migrateDownTo, migrateToLatest } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import { describeSettings, loadSettings } from '../../service/src/settings';
import { sleep } from '../../tools/harness/client';
import { sample, samples } from '../../tools/harness/metrics-text';
import { pollUntil } from '../../tools/harness/poll';
import { startService } from '../../tools/harness/service';
import {
  bearer,
  captureLog,
  freshDatabaseEnv,
  newAccount,
  newPost,
  postsFixture,
  serverFixture,
  startTestServer,
  stopServer,
  testEnv,
  usingPostgres,
} from './helpers';

/** The request id a request-log line names. */
const reqIdOf = (entry: Record<string, unknown>) => (entry.req as { id?: string } | undefined)?.id;

/** The test client plays the trusted proxy: the ids (and addresses) it sends name the log lines. */
const TRUSTING_THE_CLIENT = { TRUSTED_PROXIES: '127.0.0.1,::1' };

describe('Metrics', () => {
  const server = serverFixture();
  const scrapeUrl = () => `http://127.0.0.1:${server.running.metricsPort}/metrics`;

  const scrape = async () => {
    const res = await fetch(scrapeUrl());
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return res.text();
  };

  test('When the service runs, then metrics answer on their own port and never on the API port', async () => {
    expect(server.running.metricsPort).not.toBe(server.running.port);
    const onApi = await fetch(`${server.base}/metrics`);
    expect(onApi.status).toBe(404);
    expect(onApi.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    // The metrics listener serves nothing but /metrics: no API route leaks through it.
    for (const other of ['/', '/posts/public', '/docs', '/metrics/x']) {
      expect((await fetch(`http://127.0.0.1:${server.running.metricsPort}${other}`)).status).toBe(404);
    }
    expect(await scrape()).toContain('# TYPE http_request_duration_seconds histogram');
  });

  test('When the probes are called, then they are answered before the metrics middleware and not counted as API requests', async () => {
    const counted = async () => samples(await scrape(), 'http_request_duration_seconds_count');
    const before = await counted();
    expect((await fetch(`${server.base}/healthz/live`)).status).toBe(200);
    expect((await fetch(`${server.base}/healthz/ready`)).status).toBe(200);
    expect(await counted()).toEqual(before);
  });

  test('When API calls are answered, then their durations are counted by route template, method and status, never by raw path', async () => {
    // Through the real listener, so the server's own registry counts them.
    const account = await newAccount(server.base, 'metrics@example.com');
    const post = await newPost(server.base, account, { title: 'Counted', content: 'in the histogram' });
    await request(server.base).get(`/posts/${post.id}`).set(bearer(account)).expect(200);
    await request(server.base).get('/posts/2147480000').set(bearer(account)).expect(404);
    await request(server.base).get('/posts/public').expect(200);
    await request(server.base).get('/no/such/path/12345').expect(404);
    await request(server.base).get('/another/unknown/path').expect(404);

    const text = await scrape();
    const count = (labels: string) => sample(text, 'http_request_duration_seconds_count', labels);
    expect(count('method="POST",route="/users/",status_code="201"')).toBe(1);
    expect(count('method="POST",route="/login",status_code="200"')).toBe(1);
    expect(count('method="POST",route="/posts/",status_code="201"')).toBe(1);
    expect(count('method="GET",route="/posts/:id",status_code="200"')).toBe(1);
    expect(count('method="GET",route="/posts/:id",status_code="404"')).toBe(1);
    expect(count('method="GET",route="/posts/public",status_code="200"')).toBe(1);
    // Unknown paths share one label, so a scanner cannot create time series without bound.
    expect(count('method="GET",route="unmatched",status_code="404"')).toBe(3);
    const routes = new Set(
      samples(text, 'http_request_duration_seconds_count').map((s) => /route="([^"]*)"/.exec(s.labels)?.[1]),
    );
    expect([...routes].sort()).toEqual([
      '/login',
      '/posts/',
      '/posts/:id',
      '/posts/public',
      '/users/',
      'unmatched',
    ]);
    expect(
      sample(
        text,
        'http_request_duration_seconds_bucket',
        'le="+Inf",method="GET",route="/posts/:id",status_code="200"',
      ),
    ).toBe(1);
  });

  test('When a request is still being received, then it counts as in flight until it ends', async () => {
    expect(sample(await scrape(), 'http_requests_in_flight')).toBe(0);
    // A body that never completes keeps the request open on the server.
    const pending = httpRequest(`${server.base}/users/`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Content-Length': '100' },
    });
    pending.on('error', () => undefined);
    pending.write('{"email": ');
    const inFlight = async () => sample(await scrape(), 'http_requests_in_flight');
    const during = await pollUntil(inFlight, (n) => n === 1, { withinMs: 2500, everyMs: 50 });
    expect(during.value).toBe(1);

    pending.destroy();
    const after = await pollUntil(inFlight, (n) => n === 0, { withinMs: 2500, everyMs: 50 });
    expect(after.value).toBe(0);
  });

  test('When scraped, then the database pool reports used, idle, waiting and maximum connections', async () => {
    const text = await scrape();
    const used = sample(text, 'db_pool_connections_used');
    const idle = sample(text, 'db_pool_connections_idle');
    const max = sample(text, 'db_pool_connections_max');
    expect(sample(text, 'db_pool_acquires_pending')).toBe(0);
    // The embedded database has a single connection; PostgreSQL has DB_POOL_MAX (10 by default).
    expect(max).toBe(usingPostgres() ? 10 : 1);
    expect(used).toBe(0);
    expect(idle).toBeGreaterThanOrEqual(usingPostgres() ? 0 : 1);
    expect((used ?? 0) + (idle ?? 0)).toBeLessThanOrEqual(max ?? 0);
  });

  test('When scraped, then process and event-loop metrics are there', async () => {
    const text = await scrape();
    for (const name of [
      'nodejs_eventloop_lag_seconds',
      'nodejs_eventloop_lag_p99_seconds',
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_heap_size_used_bytes',
    ]) {
      expect(sample(text, name)).toBeGreaterThanOrEqual(0);
    }
  });

  test('When the schema is up to date, then the migration metrics say so, and they follow a rollback', async () => {
    let text = await scrape();
    const shipped = knownMigrations().length;
    expect(shipped).toBeGreaterThan(0);
    expect(sample(text, 'db_migrations_known')).toBe(shipped);
    expect(sample(text, 'db_migrations_applied')).toBe(shipped);
    expect(sample(text, 'db_migrations_pending')).toBe(0);
    expect(sample(text, 'db_schema_up_to_date')).toBe(1);
    // The time this database recorded for its last migration: for a copy of the suite's migrated
    // template, when the template was made, which may be long before this run.
    const [recorded] = await server.db
      .knex('knex_migrations')
      .max<{ at: Date | string | null }[]>('migration_time as at');
    const appliedAt = sample(text, 'db_migration_last_applied_timestamp_seconds') ?? 0;
    expect(appliedAt).toBeCloseTo(new Date(recorded?.at ?? 0).getTime() / 1000, 3);

    const logger = createLogger('silent');
    // Undone back to the one before the last two, as for a release that ends there.
    const undone = await migrateDownTo(server.db, logger, knownMigrations().at(-3) ?? null);
    try {
      expect(undone).toEqual(knownMigrations().slice(-2).reverse());
      text = await scrape();
      expect(sample(text, 'db_migrations_applied')).toBe(shipped - undone.length);
      expect(sample(text, 'db_migrations_pending')).toBe(undone.length);
      expect(sample(text, 'db_schema_up_to_date')).toBe(0);
    } finally {
      await migrateToLatest(server.db, logger);
    }
    text = await scrape();
    expect(sample(text, 'db_schema_up_to_date')).toBe(1);
    // Applied again just now, so the last one's time is this run's.
    const reappliedAt = sample(text, 'db_migration_last_applied_timestamp_seconds') ?? 0;
    expect(Math.abs(reappliedAt - Date.now() / 1000)).toBeLessThan(60);
  });

  test('When the API listener closes, then the metrics listener closes with it', async () => {
    await stopServer(server.running.server);
    await pollUntil(
      () => server.running.metricsServer.listening,
      (listening) => !listening,
      { withinMs: 1000, everyMs: 20 },
    );
    expect(server.running.metricsServer.listening).toBe(false);
    await expect(fetch(scrapeUrl())).rejects.toThrow();
  });
});

describe('Request log', () => {
  const log = captureLog();
  const { service } = postsFixture([], TRUSTING_THE_CLIENT, { appLog: log.stream });
  const app = () => service.app;

  const requestLines = () => log.entries().filter((entry) => entry.msg === 'request completed');

  test('When a request carries X-Request-Id, then the answer and its one JSON log line carry the same id, with method, path, status and duration', async () => {
    const res = await request(app())
      .get('/posts/public?search=secret-query')
      .set('X-Request-Id', 'trace-42.a:b')
      .expect(200);
    expect(res.headers['x-request-id']).toBe('trace-42.a:b');
    const lines = requestLines().filter((entry) => reqIdOf(entry) === 'trace-42.a:b');
    expect(lines).toHaveLength(1);
    const [line] = lines;
    expect(line).toMatchObject({
      level: 30,
      service: 'social-posts',
      req: { id: 'trace-42.a:b', method: 'GET', path: '/posts/public' },
      res: { status: 200 },
    });
    expect(typeof line?.responseTime).toBe('number');
    expect(typeof line?.time).toBe('string');
    // The query string (search terms) stays out of the log.
    expect(log.text()).not.toContain('secret-query');
  });

  test.each([
    ['no X-Request-Id', undefined],
    ['an X-Request-Id with spaces', 'not a valid id'],
    ['an oversized X-Request-Id', 'x'.repeat(200)],
  ])('When a request has %s, then a fresh UUID is used and returned', async (_name, given) => {
    const call = request(app()).get('/posts/public');
    if (given !== undefined) void call.set('X-Request-Id', given);
    const res = await call.expect(200);
    const id = res.headers['x-request-id'] as string;
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(requestLines().filter((entry) => reqIdOf(entry) === id)).toHaveLength(1);
  });

  test('When a user registers, logs in and calls with a token, then neither the password, the token nor the Authorization header is logged', async () => {
    const before = requestLines().length;
    const account = await newAccount(app(), 'logged@example.com');
    await newPost(app(), account);
    await request(app()).get('/posts/').set(bearer(account)).expect(200);
    await request(app()).get('/posts/').set(bearer('forged.token.value')).expect(401);
    expect(requestLines().length - before).toBe(5);
    const text = log.text();
    expect(text).not.toContain(account.password);
    expect(text).not.toContain(account.token);
    expect(text).not.toContain('forged.token.value');
    expect(text).not.toMatch(/bearer|authorization/i);
  });

  test('When an object with secrets is logged by mistake, then those fields are redacted', () => {
    const sink = captureLog();
    const logger = createLogger('info', sink.stream);
    logger.info(
      {
        password: 'p1-secret',
        token: 't1-secret',
        access_token: 'a1-secret',
        user: { password: 'p2-secret', secretKey: 's1-secret' },
        req: { headers: { authorization: 'Bearer h1-secret', cookie: 'c1-secret' } },
        env: { SECRET_KEY: 's2-secret', DB_PASSWORD: 'd1-secret' },
      },
      'oops',
    );
    expect(sink.text()).not.toMatch(/-secret/);
    expect(sink.text()).toContain('[redacted]');
  });

  test('When settings are described for the log, then the signing key and database password are left out', () => {
    const settings = loadSettings(
      testEnv({
        SECRET_KEY: 'k'.repeat(40),
        DB_HOSTNAME: 'db.example.internal',
        DB_PASSWORD: 'db-password-value',
        METRICS_PORT: '9999',
        PORT: '8001',
      }),
    );
    const described = JSON.stringify(describeSettings(settings));
    expect(described).not.toContain('k'.repeat(40));
    expect(described).not.toContain('db-password-value');
    expect(describeSettings(settings)).toMatchObject({
      port: 8001,
      metricsPort: 9999,
      database: { kind: 'postgres', host: 'db.example.internal' },
    });
  });
});

/** The test client's address as the server logs it. */
const LOOPBACK = expect.stringMatching(/127\.0\.0\.1$/) as unknown;

describe('Request log edge cases', () => {
  // The middleware on its own, in front of routes that fail and that never answer.
  function appLoggingAt(level: 'info' | 'warn') {
    const log = captureLog();
    const logger = createLogger(level, log.stream);
    const app = express();
    app.set('trust proxy', trustProxies(['127.0.0.1', '::1']));
    app.use(requestLog(logger, trustProxies(['127.0.0.1', '::1'])));
    app.get('/ok', (_req, res) => {
      res.json({ ok: true });
    });
    app.get('/boom', () => {
      throw new Error('kaboom');
    });
    app.get('/never', () => undefined);
    app.use(errorHandler(logger));
    const requestLines = () =>
      log.entries().filter((entry) => entry.msg === 'request completed' || entry.msg === 'request aborted');
    return { app, log, requestLines };
  }

  test('When a request fails with a 500, then its line is logged at error level with the same id as the failure', async () => {
    const { app, log, requestLines } = appLoggingAt('info');
    const res = await request(app).get('/boom').set('X-Request-Id', 'boom-1').expect(500);
    expect(res.headers['x-request-id']).toBe('boom-1');
    expect(requestLines()).toEqual([
      expect.objectContaining({
        level: 50,
        msg: 'request completed',
        req: { id: 'boom-1', method: 'GET', path: '/boom', client: LOOPBACK },
        res: { status: 500 },
      }),
    ]);
    expect(log.entries()).toContainEqual(
      expect.objectContaining({ level: 50, msg: 'request failed', reqId: 'boom-1' }),
    );
  });

  test('When the level is warn, then answered requests write nothing and failed ones still do', async () => {
    const { app, requestLines } = appLoggingAt('warn');
    await request(app).get('/ok').expect(200);
    expect(requestLines()).toHaveLength(0);
    await request(app).get('/boom').expect(500);
    expect(requestLines()).toEqual([expect.objectContaining({ level: 50, res: { status: 500 } })]);
  });

  test('When the client hangs up before the answer, then one "request aborted" line is logged', async () => {
    const { app, requestLines } = appLoggingAt('info');
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const { port } = server.address() as { port: number };
      const call = httpRequest({
        host: '127.0.0.1',
        port,
        path: '/never?q=1',
        headers: { 'X-Request-Id': 'gone-1' },
      });
      call.on('error', () => undefined);
      call.end();
      await sleep(100);
      call.destroy();
      await pollUntil(requestLines, (lines) => lines.length > 0, { withinMs: 1000, everyMs: 20 });
      expect(requestLines()).toEqual([
        expect.objectContaining({
          level: 30,
          msg: 'request aborted',
          req: {
            id: 'gone-1',
            method: 'GET',
            path: '/never',
            client: LOOPBACK,
          },
        }),
      ]);
    } finally {
      await stopServer(server);
    }
  });
});

/** A connection to `port` on which a GET of `path` for each of `ids`, carrying it, went out in one write. */
async function pipelined(port: number, path: string, ids: string[]): Promise<Socket> {
  const socket = tcpConnect({ host: '127.0.0.1', port });
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  socket.write(
    ids.map((id) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: ${id}\r\n\r\n`).join(''),
  );
  return socket;
}

describe('Pipelined requests abandoned by their client', () => {
  const log = captureLog();
  const server = serverFixture(TRUSTING_THE_CLIENT, { appLog: log.stream });

  const metrics = async () => (await fetch(`http://127.0.0.1:${server.running.metricsPort}/metrics`)).text();

  test('When 50 pipelined requests are sent and the connection is closed unread, then each has one log line (its status, or 499) and none stays in flight', async () => {
    const account = await newAccount(server.base);
    // Pages of 200 kB: more than the socket buffers hold, so some answers are still unsent at the close.
    for (let i = 0; i < 10; i++) await newPost(server.base, account, { content: 'x'.repeat(20_000) });

    const ids = Array.from({ length: 50 }, (_, i) => `pipelined-${i}`);
    const socket = await pipelined(server.running.port, '/posts/public?limit=10', ids);
    // Never read: the answers stay unsent once the buffers between the two ends are full.
    socket.pause();
    const logged = () =>
      log
        .entries()
        .filter((entry) => ids.includes(reqIdOf(entry) ?? ''))
        .map((entry) => ({ id: reqIdOf(entry), status: (entry.res as { status: number }).status }));
    // Some are answered before the close.
    await pollUntil(logged, (lines) => lines.length > 0, { withinMs: 5000, everyMs: 50 });
    socket.destroy();

    const { value: lines } = await pollUntil(logged, (all) => all.length >= ids.length, {
      withinMs: 5000,
      everyMs: 50,
    });
    expect(lines.map((line) => line.id).sort()).toEqual([...ids].sort());
    const statuses = new Set(lines.map((line) => line.status));
    expect([...statuses].every((status) => status === 200 || status === 499)).toBe(true);
    expect(statuses).toContain(499);
    // Answered in order: nothing after the first abandoned one was answered.
    const byId = new Map(lines.map((line) => [line.id, line.status]));
    const firstAbandoned = ids.findIndex((id) => byId.get(id) === 499);
    expect(ids.slice(firstAbandoned).every((id) => byId.get(id) === 499)).toBe(true);

    const inFlight = async () => sample(await metrics(), 'http_requests_in_flight');
    expect((await pollUntil(inFlight, (n) => n === 0, { withinMs: 2500, everyMs: 50 })).value).toBe(0);
    const text = await metrics();
    const counted = (label: string) =>
      samples(text, 'http_request_duration_seconds_count')
        .filter((s) => s.labels.includes(label))
        .reduce((sum, s) => sum + s.value, 0);
    // Every one is counted once, with the page reads the set-up made none.
    expect(counted('method="GET"')).toBe(ids.length);
    expect(counted('status_code="499"')).toBe(lines.filter((line) => line.status === 499).length);
  });
});

describe('A connection flooded with pipelined requests', () => {
  test('When 100 requests arrive pipelined at once, then the connection is closed and each request is logged once, as 499', async () => {
    const log = captureLog();
    const { running, close } = await startTestServer(TRUSTING_THE_CLIENT, { appLog: log.stream });
    try {
      const ids = Array.from({ length: 100 }, (_, i) => `flood-${i}`);
      const socket = await pipelined(running.port, '/posts/public?limit=1', ids);
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
      // Not once(): the server may reset the connection rather than end it.
      await new Promise((resolve) => socket.once('close', resolve));
      const logged = () => log.entries().filter((entry) => ids.includes(reqIdOf(entry) ?? ''));
      const { value: lines } = await pollUntil(logged, (found) => found.length >= ids.length, {
        withinMs: 5000,
        everyMs: 50,
      });
      expect(lines).toHaveLength(ids.length);
      // Far fewer answers than requests: the flood was cut off, not queued.
      expect((received.match(/HTTP\/1\.1 200/g) ?? []).length).toBeLessThan(10);
      expect(
        lines.filter((entry) => (entry.res as { status: number }).status === 499).length,
      ).toBeGreaterThan(90);
    } finally {
      await close();
    }
  });
});

describe('METRICS_PORT setting', () => {
  test.each([
    [{}, 8000, 9464],
    [{ PORT: '0' }, 0, 0],
    [{ PORT: '8080', METRICS_PORT: '9100' }, 8080, 9100],
  ])(
    'When the environment is %j, then the API port is %d and the metrics port %d',
    (env, port, metricsPort) => {
      const settings = loadSettings({ ...env });
      expect(settings.port).toBe(port);
      expect(settings.metricsPort).toBe(metricsPort);
    },
  );

  test.each([
    [{ METRICS_PORT: 'nine' }, 'METRICS_PORT must be a number'],
    [{ METRICS_PORT: '70000' }, 'METRICS_PORT must be a valid port'],
    [{ PORT: '8000', METRICS_PORT: '8000' }, 'METRICS_PORT must differ from PORT'],
  ])('When the environment is %j, then loading stops with one line naming METRICS_PORT', (env, message) => {
    expect(() => loadSettings({ ...env })).toThrow(`Invalid setting METRICS_PORT: ${message}`);
  });
});

describe('Start-up and shutdown log', () => {
  test('When the process starts and gets SIGTERM, then it logs the settings in effect, where it listens and each shutdown step, never a secret', async () => {
    const fresh = await freshDatabaseEnv();
    const secret = 'signing-key-that-must-never-be-logged-0123';
    const env = testEnv({
      ...fresh.env,
      LOG_LEVEL: 'info',
      PORT: '0',
      SECRET_KEY: secret,
      // Trust authentication (tests) ignores it; it is here to prove it never reaches the log.
      DB_PASSWORD: 'database-password-never-logged',
      SHUTDOWN_DELAY_SECONDS: '0',
      CORS_ALLOWED_ORIGINS: 'https://app.example.com',
    });
    const svc = await startService(env);
    try {
      const { port, metricsPort } = svc;
      expect((await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).status).toBe(200);
      expect((await fetch(`http://127.0.0.1:${port}/healthz/ready`)).status).toBe(200);

      expect(await svc.stop('SIGTERM')).toBe(0);
      const messages = svc.lines.map((entry) => entry.msg);
      expect(messages).toEqual(
        expect.arrayContaining([
          'starting',
          'shutdown started: readiness is 503, still serving',
          'closing the listener and draining in-flight requests',
          'metrics listener and database closed',
          'shutdown complete',
        ]),
      );
      const starting = svc.lines.find((entry) => entry.msg === 'starting');
      expect(starting?.settings).toMatchObject({
        port: 0,
        metricsPort: 0,
        corsAllowedOrigins: ['https://app.example.com'],
        shutdownDelaySeconds: 0,
        shutdownTimeoutSeconds: 15,
        database: { kind: usingPostgres() ? 'postgres' : 'embedded' },
      });
      expect(svc.lines.find((entry) => String(entry.msg).startsWith('shutdown started'))).toMatchObject({
        delaySeconds: 0,
        timeoutSeconds: 15,
      });
      expect(svc.stdout() + svc.stderr()).not.toContain(secret);
      expect(svc.stdout() + svc.stderr()).not.toContain('database-password-never-logged');
    } finally {
      await svc.stop();
      await fresh.drop();
    }
  });
});
