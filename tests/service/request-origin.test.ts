import type { Express } from 'express';
import request from 'supertest';
import { createApp } from '../../service/src/app';
import { createLogger } from '../../service/src/logger';
import { loadSettings, SettingsError } from '../../service/src/settings';
import { captureLog, fixture, openMigratedDatabase, testEnv } from './helpers';

/**
 * Who a request log line is about: the client address (X-Forwarded-For only through the proxies
 * TRUSTED_PROXIES names) and the request id (the proxy's, never a client's).
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** The test client's own address as the server sees it, IPv4 or IPv4-mapped IPv6. */
const LOOPBACK = /^(?:::ffff:)?127\.0\.0\.1$|^::1$/;

const database = fixture(openMigratedDatabase);
const log = captureLog();

/** One app per TRUSTED_PROXIES value, all on one database and one captured log. */
function appTrusting(trustedProxies: string): Express {
  const settings = loadSettings(
    testEnv({ ...database.env, LOG_LEVEL: 'info', TRUSTED_PROXIES: trustedProxies }),
  );
  return createApp({ db: database.db, settings, logger: createLogger('info', log.stream) });
}

let direct: Express;
let behindProxy: Express;
let behindTwoProxies: Express;

beforeAll(() => {
  direct = appTrusting('');
  // The test client plays the proxy.
  behindProxy = appTrusting('127.0.0.1, ::1');
  behindTwoProxies = appTrusting('127.0.0.1,::1,10.0.0.0/8');
});

interface Line {
  req: { id: string; method: string; path: string; client: string };
  res: { status: number };
}

/** The one request log line of the answer, found by the id the answer carries. */
function lineOf(res: request.Response): Line {
  const id = res.headers['x-request-id'] as string;
  const lines = log
    .entries()
    .filter((entry) => entry.msg === 'request completed' && (entry.req as { id?: string }).id === id);
  expect(lines).toHaveLength(1);
  return lines[0] as unknown as Line;
}

test('When no proxy is trusted and a client sends X-Request-Id and X-Forwarded-For, then neither reaches the log: a fresh id and the peer address', async () => {
  const res = await request(direct)
    .get('/posts/public')
    .set('X-Request-Id', 'client-chosen-1')
    .set('X-Forwarded-For', '203.0.113.9')
    .expect(200);
  expect(res.headers['x-request-id']).toMatch(UUID);
  expect(lineOf(res).req.client).toMatch(LOOPBACK);
  expect(log.text()).not.toContain('client-chosen-1');
  expect(log.text()).not.toContain('203.0.113.9');
});

test('When the peer is a trusted proxy, then its X-Request-Id is the id and the client is the address it forwarded', async () => {
  const res = await request(behindProxy)
    .get('/posts/public')
    .set('X-Request-Id', '0123456789abcdef0123456789abcdef')
    .set('X-Forwarded-For', '198.51.100.20')
    .expect(200);
  expect(res.headers['x-request-id']).toBe('0123456789abcdef0123456789abcdef');
  expect(lineOf(res)).toMatchObject({
    req: {
      id: '0123456789abcdef0123456789abcdef',
      method: 'GET',
      path: '/posts/public',
      client: '198.51.100.20',
    },
    res: { status: 200 },
  });
});

test('When a client prepends its own X-Forwarded-For entry, then the address the trusted proxy saw is logged, not the forged one', async () => {
  const res = await request(behindProxy)
    .get('/posts/public')
    .set('X-Forwarded-For', '192.0.2.66, 198.51.100.21')
    .expect(200);
  expect(lineOf(res).req.client).toBe('198.51.100.21');
});

test('When two trusted hops forward, then the address before the first of them is logged', async () => {
  const res = await request(behindTwoProxies)
    .get('/posts/public')
    .set('X-Forwarded-For', '192.0.2.66, 198.51.100.22, 10.4.5.6')
    .expect(200);
  expect(lineOf(res).req.client).toBe('198.51.100.22');
});

test('When a trusted proxy sends no X-Forwarded-For, then the client is the proxy itself', async () => {
  const res = await request(behindProxy).get('/posts/public').expect(200);
  expect(lineOf(res).req.client).toMatch(LOOPBACK);
  expect(res.headers['x-request-id']).toMatch(UUID);
});

test.each([
  ['not an address', 'proxy.example.com'],
  ['a prefix too long', '10.0.0.0/33'],
  ['an IPv6 prefix too long', 'fd00::/129'],
  ['a prefix with a leading zero', '10.0.0.0/08'],
  ['two slashes', '10.0.0.0/8/8'],
])('When TRUSTED_PROXIES has %s, then start-up refuses it naming the entry', (_name, entry) => {
  expect(() => loadSettings(testEnv({ TRUSTED_PROXIES: `10.0.0.1, ${entry}` }))).toThrow(
    new SettingsError(
      `Invalid setting TRUSTED_PROXIES: has "${entry}", which is not an IP address or CIDR like 10.0.0.0/8 or fd00::/8`,
    ),
  );
});

test('When TRUSTED_PROXIES lists addresses and CIDRs of both families, then each is kept', () => {
  expect(
    loadSettings(testEnv({ TRUSTED_PROXIES: ' 10.0.0.0/8,fd00::/8 , 192.0.2.1,' })).trustedProxies,
  ).toEqual(['10.0.0.0/8', 'fd00::/8', '192.0.2.1']);
  expect(loadSettings(testEnv({ TRUSTED_PROXIES: '' })).trustedProxies).toEqual([]);
});

test.each([' x', '-release', 'a'.repeat(201), 'name with space'])(
  'When TOKEN_ISSUER is %j, then start-up refuses it',
  (issuer) => {
    expect(() => loadSettings(testEnv({ TOKEN_ISSUER: issuer }))).toThrow(/Invalid setting TOKEN_ISSUER/);
  },
);

test('When TOKEN_ISSUER is unset or empty, then it is social-posts', () => {
  expect(loadSettings(testEnv({ TOKEN_ISSUER: '' })).tokenIssuer).toBe('social-posts');
  expect(loadSettings(testEnv({})).tokenIssuer).toBe('social-posts');
});
