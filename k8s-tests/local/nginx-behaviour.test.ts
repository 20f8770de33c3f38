/**
 * The translation on real nginx (Debian's, with the headers-more module), against a small backend:
 * what a client observes where the emulation used to differ from ingress-nginx (controller v1.14.5,
 * kubernetes/ingress-nginx 0a6fadc01bd4706bc77ceaf91487345a8d03d9c0). Needs root (nginx runs as
 * nobody, like in the runner); npm run k8s:local runs it before the suite.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serviceEnv } from '../../tools/harness/env';
import { freePort, listenLocal, startService, type ServiceProcess } from '../../tools/harness/service';
import { ensureTools } from '../../tools/tools';
import { translateGateway } from './gateway-config';
import { controller, FIXTURE_HOST, ingress } from './ingress-fixtures';
import { translate } from './nginx-config';
import { HEADERS_MORE_MODULE, Nginx } from './nginx';
import { gatewayInputs, namespace as releaseNamespace, renderChart } from './release';

const HOST = FIXTURE_HOST;
/** The host of the chart's HTTPRoutes in the e2e values. */
const GATEWAY_HOST = 'social-posts.localtest.me';
const gateway = gatewayInputs();

// The chart's shape: Exact /login and /users/ limited (10/min, burst 10), Prefix / and /docs/ not.
const ingresses = [
  ingress(
    'auth',
    [
      { path: '/login', pathType: 'Exact' },
      { path: '/users/', pathType: 'Exact' },
    ],
    {
      'nginx.ingress.kubernetes.io/limit-rpm': '10',
      'nginx.ingress.kubernetes.io/limit-burst-multiplier': '1',
    },
  ),
  ingress('general', [
    { path: '/', pathType: 'Prefix' },
    { path: '/docs/', pathType: 'Prefix' },
  ]),
];

interface Seen {
  path: string;
  requestId: string | undefined;
}

let tmp = '';
let nginx: Nginx | undefined;
let backend: Server | undefined;
let listenPort = 0;
let statusPort = 0;
let backendPort = 0;
let generation = 0;
const seen: Seen[] = [];

/** What either translation needs of this test's nginx: where it runs, its generation, the ready endpoints. */
const emulation = (endpoints: string[]) => ({
  prefix: join(tmp, 'nginx'),
  listenPort,
  statusPort,
  generation,
  endpoints: () => endpoints,
});

function conf(endpoints: string[]): string {
  const settings = { ...emulation(endpoints), namespace: 'ns', headersMoreModule: HEADERS_MORE_MODULE };
  return translate(ingresses, controller, settings);
}

async function configure(endpoints: string[]): Promise<void> {
  generation++;
  if (!nginx) {
    nginx = new Nginx(join(tmp, 'nginx'), statusPort);
    await nginx.start(conf(endpoints), generation);
  } else {
    await nginx.reload(conf(endpoints), generation);
  }
}

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
}

function call(method: string, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolvePromise, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: listenPort,
        method,
        path,
        agent: false,
        headers: { Host: HOST, ...headers },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          resolvePromise({ status: res.statusCode ?? 0, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) throw new Error('run as root: nginx runs as nobody, as in npm run k8s:local');
  tmp = mkdtempSync(join(tmpdir(), 'social-posts-nginx-'));
  chmodSync(tmp, 0o755);
  [listenPort, statusPort] = [await freePort(), await freePort()];
  backend = createServer((req, res) => {
    const given = req.headers['x-request-id'];
    seen.push({ path: req.url ?? '', requestId: typeof given === 'string' ? given : undefined });
    // Like the service: Express sends no Server header of its own, so none reaches the client.
    res.writeHead(200, { 'Content-Type': 'text/plain' }).end('backend');
  });
  backendPort = await listenLocal(backend);
});

afterAll(async () => {
  await nginx?.stop();
  backend?.closeAllConnections();
  await new Promise((resolvePromise) => backend?.close(resolvePromise));
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('When no endpoint is ready, then nginx answers 503 before limit_req, so those requests do not use up the limit', async () => {
  await configure([]);
  // 15 > 1 + burst 10: had they been counted, the last four would be 429.
  const withoutEndpoints: number[] = [];
  for (let i = 0; i < 15; i++) withoutEndpoints.push((await call('POST', '/login')).status);
  expect(withoutEndpoints).toEqual(Array<number>(15).fill(503));

  // Endpoints back (the limit zone keeps its state across the reload): the full allowance is left.
  await configure([`127.0.0.1:${backendPort}`]);
  const withEndpoints: number[] = [];
  for (let i = 0; i < 12; i++) withEndpoints.push((await call('POST', '/login')).status);
  expect(withEndpoints).toEqual([...Array<number>(11).fill(200), 429]);
});

test('When nginx answers (proxied, redirect, 404 of the default server, 429), then no answer carries a Server header', async () => {
  const answers = [
    await call('GET', '/posts/public'),
    await call('POST', '/users'),
    await call('GET', '/', { Host: 'other.example' }),
    await call('POST', '/login'),
  ];
  expect(answers.map((a) => a.status)).toEqual([200, 301, 404, 429]);
  for (const answer of answers) expect(answer.headers.server).toBeUndefined();
});

test("When a path lacks its slash (/users, a Prefix /docs/'s /docs), then nginx answers 301 to the path with the slash, naming no port", async () => {
  const users = await call('POST', '/users');
  expect(users.status).toBe(301);
  expect(users.headers.location).toBe(`http://${HOST}/users/`);
  // Prefix /docs/ gets "location /docs/" and "location = /docs/"; nothing serves /docs itself.
  const docs = await call('GET', '/docs');
  expect(docs.status).toBe(301);
  expect(docs.headers.location).toBe(`http://${HOST}/docs/`);
  seen.length = 0;
  expect((await call('GET', '/docs/')).status).toBe(200);
  expect(seen.map((s) => s.path)).toEqual(['/docs/']);
});

test("When a client sends X-Request-ID or none, then nginx's own 32-hex id reaches the backend, never the client's", async () => {
  seen.length = 0;
  await call('GET', '/posts/public', { 'X-Request-ID': 'client-chosen-id.1' });
  await call('GET', '/posts/public');
  expect(seen.map((s) => s.requestId)).toEqual([
    expect.stringMatching(/^[0-9a-f]{32}$/),
    expect.stringMatching(/^[0-9a-f]{32}$/),
  ]);
  expect(seen[0]?.requestId).not.toBe(seen[1]?.requestId);
});

describe("The service's request log behind either proxy path", () => {
  let service: ServiceProcess | undefined;

  // A cold start (tsx, the embedded database) takes a minute on a loaded machine.
  beforeAll(async () => {
    // The service as operators run it, trusting nginx (loopback here, the proxy pods' network in a cluster).
    service = await startService(
      serviceEnv(
        {
          PORT: '0',
          METRICS_PORT: '0',
          LOG_LEVEL: 'info',
          SHUTDOWN_DELAY_SECONDS: '0',
          TRUSTED_PROXIES: '127.0.0.1',
        },
        'embedded',
      ),
      { withinMs: 170_000 },
    );
  }, 180_000);

  afterAll(async () => {
    // The cases after these find nginx as they left it: the Ingress objects, the small backend.
    generation++;
    await nginx?.reload(conf([`127.0.0.1:${backendPort}`]), generation);
    await service?.stop();
  });

  const servicePort = () => service?.port ?? 0;
  /** The service's request log lines with this id. */
  const linesWithId = (id: string) =>
    (service?.lines ?? []).filter((line) => (line.req as { id?: string } | undefined)?.id === id);

  const paths = [
    [
      'ingress-nginx (the chart-shaped Ingress objects, the controller values with the location-snippet)',
      HOST,
      () => conf([`127.0.0.1:${servicePort()}`]),
    ],
    [
      "NGINX Gateway Fabric (the chart's HTTPRoutes, with their RequestHeaderModifier)",
      GATEWAY_HOST,
      () =>
        translateGateway(
          renderChart(ensureTools().helm, ['k8s-tests/values-e2e-gateway.yaml']),
          gateway.gateway,
          gateway.values,
          { ...emulation([`127.0.0.1:${servicePort()}`]), namespace: releaseNamespace },
        ),
    ],
  ] as const;

  test.each(paths)(
    "Through %s, when a client sends its own X-Request-ID, then the service logs and answers nginx's id and never the client's",
    async (_name, host, config) => {
      generation++;
      await nginx?.reload(config(), generation);
      const forged = `forged-${generation}`;
      const answer = await call('GET', '/posts/public', { Host: host, 'X-Request-ID': forged });
      expect(answer.status).toBe(200);
      const id = answer.headers['x-request-id'];
      expect(id).toMatch(/^[0-9a-f]{32}$/);
      // The line is written once the answer is finished, possibly just after the client has it.
      for (let i = 0; i < 40 && linesWithId(String(id)).length === 0; i++)
        await new Promise((resolvePromise) => setTimeout(resolvePromise, 50));
      expect(linesWithId(String(id))).toEqual([
        expect.objectContaining({
          req: expect.objectContaining({ client: '127.0.0.1', path: '/posts/public' }) as unknown,
        }),
      ]);
      expect(linesWithId(forged)).toEqual([]);
      expect(service?.stdout()).not.toContain(forged);
    },
  );
});
