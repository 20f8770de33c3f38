/**
 * The Gateway translation on its own: the NGINX Gateway Fabric mapping k8s-tests/README.md documents, with
 * the chart's own rendered objects, and loud refusals of anything else.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTools } from '../../tools/tools';
import { translateGateway, type GatewayObject, type NginxSettings } from './gateway-config';
import { gatewayInputs, renderChart } from './release';

const settings: NginxSettings = {
  prefix: '/tmp/x',
  listenPort: 8080,
  statusPort: 8081,
  generation: 1,
  namespace: 'social-posts-dev',
  endpoints: () => ['127.0.0.1:9001', '127.0.0.1:9002'],
};

const { gateway, values } = gatewayInputs();
// The chart as the --gateway run renders it: the translation is checked on the real objects.
const rendered = renderChart(ensureTools().helm, ['k8s-tests/values-e2e-gateway.yaml']) as GatewayObject[];

type Spec = Record<string, unknown>;
function withSpec(kind: string, change: (spec: Spec) => Spec): GatewayObject[] {
  // The first object of the kind (for HTTPRoute: the auth route, which helm renders first).
  const index = rendered.findIndex((object) => object.kind === kind);
  const found = rendered[index];
  if (!found) throw new Error(`no ${kind} rendered`);
  const objects = [...rendered];
  objects[index] = { ...found, spec: change(structuredClone(found.spec) as Spec) };
  return objects;
}

function authRule(spec: Spec): Spec {
  return (spec.rules as Spec[])[0] as Spec;
}

test('When the rendered HTTPRoutes and policies are translated, then nginx.conf is what NGINX Gateway Fabric 2.6.7 writes', () => {
  const conf = translateGateway(rendered, gateway, values, settings);
  // RateLimitPolicy: the zone in the http context, limit_req and 429 in both auth locations only.
  expect(conf).toContain(
    'limit_req_zone $binary_remote_addr zone=social-posts-dev_rl_social-posts-auth_rule0:10m rate=10r/m;',
  );
  const limited =
    /location (= \/login|= \/users\/) \{\n\s+limit_req zone=social-posts-dev_rl_social-posts-auth_rule0 burst=10 nodelay;\n\s+limit_req_status 429;\n\s+proxy_connect_timeout 5s;\n\s+proxy_read_timeout 3s;\n\s+proxy_send_timeout 3s;/g;
  expect([...conf.matchAll(limited)].map((m) => m[1])).toEqual(['= /login', '= /users/']);
  // PathPrefix /: one prefix location, not limited, with the ProxySettingsPolicy's time-outs.
  expect(conf).toMatch(/location \/ \{\n\s+proxy_connect_timeout 5s;\n\s+proxy_read_timeout 3s;/);
  // Exact /users: NGF's redirect location (rewrite + return), inside the limited route; the
  // return runs before limit_req, so the redirect itself is not counted.
  expect(conf).toMatch(
    /location = \/users \{\n\s+limit_req zone=social-posts-dev_rl_social-posts-auth_rule0 burst=10 nodelay;\n(\s+.*\n){4}\s+rewrite \^ \/users\/;\n\s+return 308 "\$scheme:\/\/\$host:80\$uri\$is_args\$args";/,
  );
  expect(conf.match(/limit_req zone=/g)).toHaveLength(3);
  for (const fragment of [
    'server_name social-posts.localtest.me;',
    'upstream social-posts-dev_social-posts_80 {\n    random two least_conn;',
    'server 127.0.0.1:9002;',
    'keepalive 16;',
    'proxy_set_header Host "$gw_api_compliant_host";',
    'proxy_pass http://social-posts-dev_social-posts_80;',
  ])
    expect(conf).toContain(fragment);
  expect(conf).toMatch(/default_server;\n\s+default_type text\/html;\n\s+return 404;/);
  // A rule for "/" exists, so NGF adds no "= /" 404 location.
  expect(conf).not.toContain('location = / {');
  expect(conf).not.toContain('location /users');
  expect(conf.match(/proxy_pass /g)).toHaveLength(3);
});

test('When tracing is on, then the ObservabilityPolicy is accepted and changes nothing else, as NGINX Gateway Fabric writes no otel directive without NginxProxy telemetry', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gateway-tracing-'));
  try {
    const file = join(dir, 'tracing.yaml');
    writeFileSync(file, 'tracing:\n  enabled: true\n  endpoint: http://otel-collector.observability:4318\n');
    const traced = renderChart(ensureTools().helm, [
      'k8s-tests/values-e2e-gateway.yaml',
      file,
    ]) as GatewayObject[];
    expect(traced.filter((object) => object.kind === 'ObservabilityPolicy')).toHaveLength(1);
    const conf = translateGateway(traced, gateway, values, settings);
    const note = /^ *# ObservabilityPolicy social-posts: not accepted without NginxProxy telemetry.*\n/m;
    expect(conf).toMatch(note);
    expect(conf).not.toContain('otel_');
    expect(conf.replace(note, '')).toBe(translateGateway(rendered, gateway, values, settings));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('When a PathPrefix has no trailing slash, then it gets "/p/" and "= /p"; when no rule matches "/", then "= /" answers 404', () => {
  const objects = withSpec('HTTPRoute', (spec) => {
    (authRule(spec).matches as Spec[]).push({ path: { type: 'PathPrefix', value: '/docs' } });
    return spec;
  }).filter((o) => o.metadata.name !== 'social-posts' || o.kind !== 'HTTPRoute');
  const withoutGeneral = objects.map((o) =>
    o.kind === 'ProxySettingsPolicy'
      ? {
          ...o,
          spec: { ...(o.spec as Spec), targetRefs: ((o.spec as Spec).targetRefs as Spec[]).slice(0, 1) },
        }
      : o,
  );
  const conf = translateGateway(withoutGeneral, gateway, values, settings);
  expect(conf).toContain('location /docs/ {');
  expect(conf).toContain('location = /docs {');
  expect(conf).toMatch(/location = \/ \{\n\s+return 404;/);
});

test('When no endpoint is ready, then the upstream is the 503 server, as in NGINX Gateway Fabric', () => {
  const conf = translateGateway(rendered, gateway, values, { ...settings, endpoints: () => [] });
  expect(conf).toContain('server unix:/tmp/x/nginx-503-server.sock;');
  expect(conf).toMatch(/listen unix:\/tmp\/x\/nginx-503-server.sock;\n\s+access_log off;\n\s+return 503;/);
});

test.each<[string, () => GatewayObject[], string]>([
  [
    'HTTPRoute timeouts (NGF ignores them)',
    () => withSpec('HTTPRoute', (s) => ({ ...s, rules: [{ ...authRule(s), timeouts: { request: '3s' } }] })),
    'rules\\[0\\]\\.timeouts',
  ],
  [
    'a redirect to another host',
    () =>
      withSpec('HTTPRoute', (s) => ({
        ...s,
        rules: [
          authRule(s),
          {
            ...((s.rules as Spec[])[1] as Spec),
            filters: [
              { type: 'RequestRedirect', requestRedirect: { hostname: 'x.example', statusCode: 301 } },
            ],
          },
        ],
      })),
    'requestRedirect\\.hostname',
  ],
  [
    'a header modifier filter',
    () =>
      withSpec('HTTPRoute', (s) => ({
        ...s,
        rules: [
          {
            matches: [{ path: { type: 'Exact', value: '/x' } }],
            filters: [{ type: 'RequestHeaderModifier', requestHeaderModifier: { set: [] } }],
          },
        ],
      })),
    'filters\\[0\\]\\.requestHeaderModifier',
  ],
  [
    'a method match',
    () =>
      withSpec('HTTPRoute', (s) => ({ ...s, rules: [{ ...authRule(s), matches: [{ method: 'POST' }] }] })),
    'matches\\[0\\]\\.method',
  ],
  [
    'a RegularExpression path',
    () =>
      withSpec('HTTPRoute', (s) => ({
        ...s,
        rules: [{ ...authRule(s), matches: [{ path: { type: 'RegularExpression', value: '/login' } }] }],
      })),
    'path match type RegularExpression',
  ],
  [
    'another Gateway',
    () => withSpec('HTTPRoute', (s) => ({ ...s, parentRefs: [{ name: 'other' }] })),
    'parent Gateway social-posts-dev/other',
  ],
  [
    'a wildcard hostname',
    () => withSpec('HTTPRoute', (s) => ({ ...s, hostnames: ['*.localtest.me'] })),
    'wildcard hostname',
  ],
  [
    'a dry-run RateLimitPolicy',
    () =>
      withSpec('RateLimitPolicy', (s) => ({ ...s, rateLimit: { ...(s.rateLimit as Spec), dryRun: true } })),
    'rateLimit\\.dryRun',
  ],
  [
    'a policy on the Gateway',
    () =>
      withSpec('RateLimitPolicy', (s) => ({
        ...s,
        targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'social-posts-e2e' }],
      })),
    'target gateway\\.networking\\.k8s\\.io/Gateway',
  ],
  [
    'a policy on a route that is not rendered',
    () =>
      withSpec('RateLimitPolicy', (s) => ({
        ...s,
        targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'typo' }],
      })),
    'targets HTTPRoute typo',
  ],
  [
    'proxy buffering settings',
    () => withSpec('ProxySettingsPolicy', (s) => ({ ...s, buffering: { disable: true } })),
    'spec\\.buffering',
  ],
  [
    'a span name on the ObservabilityPolicy',
    () => [
      ...rendered,
      {
        apiVersion: 'gateway.nginx.org/v1alpha2',
        kind: 'ObservabilityPolicy',
        metadata: { name: 'x' },
        spec: {
          targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'social-posts' }],
          tracing: { strategy: 'ratio', spanName: 'api' },
        },
      },
    ],
    'tracing\\.spanName',
  ],
  [
    "Envoy Gateway's BackendTrafficPolicy",
    () => [
      ...rendered,
      { apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'x' } },
    ],
    'BackendTrafficPolicy x',
  ],
  [
    'an Ingress next to the routes',
    () => [...rendered, { apiVersion: 'networking.k8s.io/v1', kind: 'Ingress', metadata: { name: 'x' } }],
    'Ingress x next to the HTTPRoutes',
  ],
])('When the values ask for %s, then the translation refuses it', (_what, objects, expected) => {
  expect(() => translateGateway(objects(), gateway, values, settings)).toThrow(
    new RegExp(`not modelled by the local Gateway emulation: .*${expected}`),
  );
});

test('When the values ask for an HTTPS listener, NginxProxy settings, several nginx replicas or snippets, then the translation refuses them', () => {
  const https = {
    ...gateway,
    spec: {
      gatewayClassName: 'nginx',
      listeners: [{ name: 'http', protocol: 'HTTPS', port: 443, tls: { certificateRefs: [{ name: 'c' }] } }],
    },
  };
  expect(() => translateGateway(rendered, https, values, settings)).toThrow(/not modelled/);
  for (const changed of [
    { ...values, nginx: { ...values.nginx, config: { rewriteClientIP: { mode: 'ProxyProtocol' } } } },
    { ...values, nginx: { ...values.nginx, replicas: 2 } },
    { ...values, nginxGateway: { ...values.nginxGateway, snippetsFilters: { enable: true } } },
  ])
    expect(() => translateGateway(rendered, gateway, changed, settings)).toThrow(/not modelled/);
});
