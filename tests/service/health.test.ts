import { waitForStatus } from '../../tools/harness/client';
import { rawExchange } from '../../tools/harness/hostile';
import { postgresServer } from '../../tools/harness/postgres';
import { Relay } from '../../tools/harness/relay';
import { fixture, freshDatabaseEnv, startTestServer, testOnPostgres, usingPostgres } from './helpers';

const ALLOWED = 'https://status.example.com';
/** In front of PostgreSQL: closing it is, to the service, the database going away. */
const relay = new Relay(postgresServer.port, postgresServer.host);
const server = fixture(async () => {
  const overrides: Record<string, string> = { CORS_ALLOWED_ORIGINS: ALLOWED };
  if (usingPostgres()) {
    await relay.start();
    Object.assign(overrides, { DB_HOSTNAME: '127.0.0.1', DB_PORT: String(relay.port) });
  }
  return startTestServer(overrides);
});
// Runs after the server's close: fixture() declared its afterAll first.
afterAll(() => relay.close());

const get = (path: string) => fetch(`${server.base}${path}`);

/** Sends raw bytes and returns everything the server answers, once it has closed the connection. */
async function rawAnswer(bytes: string): Promise<string> {
  const { text, closed } = await rawExchange(server.running.port, bytes, {
    waitMs: 10_000,
    encoding: 'utf8',
  });
  expect(closed).toBe(true);
  return text;
}

describe('Malformed HTTP', () => {
  test('When the request line is garbage, then 400 problem+json and the connection closes', async () => {
    const answer = await rawAnswer('HELLO THERE\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer).toContain('Content-Type: application/problem+json');
    expect(answer).toContain('"detail":"The request is not valid HTTP"');
  });

  test('When the headers are too large, then 431 problem+json', async () => {
    const answer = await rawAnswer(
      `GET /posts/public HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 431 /);
    expect(answer).toContain('"status":431');
  });
});

describe('Health endpoints', () => {
  test('When the database answers, then live and ready are both 200', async () => {
    const live = await get('/healthz/live');
    const ready = await get('/healthz/ready');
    expect(live.status).toBe(200);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ok' });
    expect(ready.headers.get('cache-control')).toBe('no-store');
  });

  test.each(['/healthz/live', '/healthz/ready'])(
    'When an allowed origin sends a preflight to %s, then 200 allows it like any API path',
    async (path) => {
      const res = await fetch(`${server.base}${path}`, {
        method: 'OPTIONS',
        headers: {
          Origin: ALLOWED,
          'Access-Control-Request-Method': 'GET',
          'Access-Control-Request-Headers': 'x-probe',
        },
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('access-control-allow-origin')).toBe(ALLOWED);
      expect(res.headers.get('access-control-allow-methods')).toContain('GET');
      expect(res.headers.get('access-control-allow-headers')).toBe('x-probe');
      expect(res.headers.get('vary')).toMatch(/Origin/);
    },
  );

  test('When a browser reads a probe, then only an allowed origin gets Access-Control-Allow-Origin, and the answer is the same', async () => {
    const allowed = await fetch(`${server.base}/healthz/ready`, { headers: { Origin: ALLOWED } });
    expect(allowed.status).toBe(200);
    expect(await allowed.json()).toEqual({ status: 'ok' });
    expect(allowed.headers.get('access-control-allow-origin')).toBe(ALLOWED);
    expect(allowed.headers.get('vary')).toMatch(/Origin/);
    expect(allowed.headers.get('cache-control')).toBe('no-store');
    const foreign = await fetch(`${server.base}/healthz/live`, {
      headers: { Origin: 'https://evil.example.net' },
    });
    expect(foreign.status).toBe(200);
    expect(foreign.headers.get('access-control-allow-origin')).toBeNull();
  });

  test('When the database stops, then ready is 503 within 2 s, live stays 200 and API calls get 503 problem+json', async () => {
    await (usingPostgres() ? relay.close() : server.db.close());

    const started = Date.now();
    const ready = await waitForStatus(server.base, '/healthz/ready', 503, 2000);
    expect(ready?.status).toBe(503);
    expect(Date.now() - started).toBeLessThan(2500);
    // The contract's error shape, as every other 503; and never cached by a proxy.
    expect(ready?.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(ready?.headers.get('cache-control')).toBe('no-store');
    const body = ready?.body as { detail: string };
    expect(body.detail).toMatch(/database/);
    expect(JSON.stringify(body)).not.toMatch(/ECONNREFUSED|stack|at /);

    expect((await get('/healthz/live')).status).toBe(200);

    const api = await get('/posts/public');
    expect(api.status).toBe(503);
    expect(api.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(((await api.json()) as { detail: string }).detail).toMatch(/database/);
  });

  testOnPostgres('When the database comes back, then ready is 200 again without a restart', async () => {
    await relay.start(relay.port);
    const ready = await waitForStatus(server.base, '/healthz/ready', 200, 5000);
    expect(ready?.status).toBe(200);
    expect((await get('/posts/public')).status).toBe(200);
  });

  testOnPostgres(
    "When the service's database is dropped under it, then the connections it opens are refused and API calls get 503 problem+json, not 500",
    async () => {
      const fresh = await freshDatabaseEnv();
      const own = await startTestServer(fresh.env);
      try {
        expect((await fetch(`${own.base}/posts/public`)).status).toBe(200);
        // Its pooled connections end with it (57P01); every new one is refused (3D000).
        await fresh.drop();
        for (let i = 0; i < 3; i++) {
          const api = await fetch(`${own.base}/posts/public`);
          expect(api.status).toBe(503);
          expect(api.headers.get('content-type')).toMatch(/^application\/problem\+json/);
          expect(((await api.json()) as { detail: string }).detail).toMatch(/database/);
        }
        expect((await fetch(`${own.base}/healthz/ready`)).status).toBe(503);
      } finally {
        await own.close();
      }
    },
  );
});
