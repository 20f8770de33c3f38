/** The translation on its own: the mapping k8s-tests/README.md documents, and loud refusals of anything else. */
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import { controller, ingress } from './ingress-fixtures';
import { translate, type ControllerValues, type NginxSettings } from './nginx-config';

const settings: NginxSettings = {
  prefix: '/tmp/x',
  listenPort: 8080,
  statusPort: 8081,
  generation: 1,
  namespace: 'ns',
  endpoints: () => ['127.0.0.1:9001', '127.0.0.1:9002'],
  headersMoreModule: '/mods/ngx_http_headers_more_filter_module.so',
};

const auth = ingress(
  'auth',
  [
    { path: '/login', pathType: 'Exact' },
    { path: '/users/', pathType: 'Exact' },
  ],
  {
    'nginx.ingress.kubernetes.io/limit-rpm': '10',
    'nginx.ingress.kubernetes.io/limit-burst-multiplier': '1',
    'nginx.ingress.kubernetes.io/proxy-read-timeout': '3',
  },
);

test('When the rendered Ingresses are translated, then Exact, Prefix, the limit and the time-outs map the way ingress-nginx does', () => {
  const conf = translate(
    [
      auth,
      ingress('general', [{ path: '/', pathType: 'Prefix' }]),
      ingress('docs', [{ path: '/docs', pathType: 'Prefix' }]),
    ],
    controller,
    settings,
  );
  expect(conf).toContain('limit_req_status 429;');
  expect(conf).toContain('limit_req_zone $binary_remote_addr zone=ns_auth_rpm:5m rate=10r/m;');
  expect(conf).toMatch(/location = \/login \{\n\s+limit_req zone=ns_auth_rpm burst=10 nodelay;/);
  expect(conf).toMatch(/location = \/users\/ \{\n\s+limit_req zone=ns_auth_rpm burst=10 nodelay;/);
  expect(conf).toMatch(/location \/ \{\n\s+proxy_connect_timeout 5s;/);
  for (const fragment of [
    'location /docs/ {',
    'location = /docs {',
    'proxy_read_timeout 3s;',
    'proxy_pass http://ns-api-http;',
    'server 127.0.0.1:9002 max_fails=0;',
    'server_name api.example;',
  ])
    expect(conf).toContain(fragment);
});

test("When no burst multiplier is set, then the burst is ingress-nginx's default multiplier 5", () => {
  const conf = translate(
    [ingress('a', [{ path: '/a', pathType: 'Exact' }], { 'nginx.ingress.kubernetes.io/limit-rpm': '10' })],
    controller,
    settings,
  );
  expect(conf).toContain('burst=50 nodelay');
});

/** The translation of one Ingress with one Exact path and these annotations. */
function oneExactPath(annotations: Record<string, string>): () => string {
  return () =>
    translate([ingress('x', [{ path: '/x', pathType: 'Exact' }], annotations)], controller, settings);
}

test.each([
  ['use-regex', { 'nginx.ingress.kubernetes.io/use-regex': 'true' }],
  ['rewrite-target', { 'nginx.ingress.kubernetes.io/rewrite-target': '/' }],
  ['a snippet', { 'nginx.ingress.kubernetes.io/configuration-snippet': 'return 200;' }],
  ['limit-rps', { 'nginx.ingress.kubernetes.io/limit-rps': '1' }],
  ['the legacy class annotation', { 'kubernetes.io/ingress.class': 'nginx' }],
])('When an Ingress asks for %s, then the translation refuses it', (_what, annotations) => {
  expect(oneExactPath(annotations)).toThrow(/not modelled/);
});

test('When an Ingress has ImplementationSpecific paths, TLS, another class, a duplicate path or an unknown controller setting, then the translation refuses it', () => {
  const plain = ingress('x', [{ path: '/x', pathType: 'Exact' }]);
  const cases: [IIngress[], ControllerValues][] = [
    [[ingress('x', [{ path: '/x', pathType: 'ImplementationSpecific' }])], controller],
    [[{ ...plain, spec: { ...plain.spec, tls: [{ hosts: ['api.example'] }] } }], controller],
    [[{ ...plain, spec: { ...plain.spec, ingressClassName: 'other' } }], controller],
    [[plain, ingress('y', [{ path: '/x', pathType: 'Exact' }])], controller],
    [[plain], { controller: { config: { 'proxy-next-upstream': 'error timeout' } } }],
    [[plain], { controller: { replicaCount: 2 } }],
    [[plain], { controller: { allowSnippetAnnotations: true } }],
  ];
  for (const [ingresses, values] of cases)
    expect(() => translate(ingresses, values, settings)).toThrow(/not modelled/);
});

/** The body of `location <match> { … }` in the generated configuration. */
function locationBody(conf: string, match: string): string {
  const start = conf.indexOf(`    location ${match} {\n`);
  if (start < 0) throw new Error(`no location ${match} in:\n${conf}`);
  return conf.slice(start, conf.indexOf('\n    }', start));
}

// Behaviour each one follows, in kubernetes/ingress-nginx at controller-v1.14.5
// (0a6fadc01bd4706bc77ceaf91487345a8d03d9c0); nginx-behaviour.test.ts runs the same on real nginx.

test('When no endpoint is ready, then the location answers 503 itself, before limit_req (balancer.lua rewrite())', () => {
  // The Lua balancer's rewrite phase answers 503 when the backend has no endpoints; limit_req runs
  // later (preaccess), so those requests are not counted. `return` ends the rewrite phase the same way.
  const conf = translate([auth], controller, { ...settings, endpoints: () => [] });
  const body = locationBody(conf, '= /login');
  expect(body).toContain('return 503;');
  expect(body.indexOf('return 503;')).toBeLessThan(body.indexOf('limit_req zone='));
  expect(conf).not.toContain('no-endpoints.sock');
  // With endpoints, no 503 of its own.
  expect(locationBody(translate([auth], controller, settings), '= /login')).not.toContain('return 503;');
});

test('When nothing sets retries, then each location carries the controller defaults "error timeout" and 3 tries (config.go)', () => {
  const conf = translate([ingress('a', [{ path: '/a', pathType: 'Exact' }])], controller, settings);
  const body = locationBody(conf, '= /a');
  expect(body).toContain('proxy_next_upstream error timeout;');
  expect(body).toContain('proxy_next_upstream_timeout 0;');
  expect(body).toContain('proxy_next_upstream_tries 3;');
  // No configuration-wide override of the template's per-location value.
  expect(conf).not.toContain('proxy_next_upstream off;');
});

test('When an Ingress sets proxy-next-upstream and proxy-next-upstream-tries, then only its own locations change', () => {
  const conf = translate(
    [
      ingress('a', [{ path: '/a', pathType: 'Exact' }], {
        'nginx.ingress.kubernetes.io/proxy-next-upstream': 'error',
        'nginx.ingress.kubernetes.io/proxy-next-upstream-tries': '2',
      }),
      ingress('b', [{ path: '/b', pathType: 'Exact' }]),
    ],
    controller,
    settings,
  );
  expect(locationBody(conf, '= /a')).toContain('proxy_next_upstream error;');
  expect(locationBody(conf, '= /a')).toContain('proxy_next_upstream_tries 2;');
  expect(locationBody(conf, '= /b')).toContain('proxy_next_upstream error timeout;');
  expect(locationBody(conf, '= /b')).toContain('proxy_next_upstream_tries 3;');
});

test('When retries include non_idempotent, then it goes last, as buildNextUpstream writes it', () => {
  const conf = translate(
    [
      ingress('a', [{ path: '/a', pathType: 'Exact' }], {
        'nginx.ingress.kubernetes.io/proxy-next-upstream': 'non_idempotent error http_502',
      }),
    ],
    controller,
    settings,
  );
  expect(locationBody(conf, '= /a')).toContain('proxy_next_upstream error http_502 non_idempotent;');
});

test.each([
  ['a condition nginx does not know', 'error retry'],
  ['a comma list', 'error,timeout'],
  ['an empty value', ''],
])(
  'When proxy-next-upstream is %s, then the translation refuses it (the controller would drop it silently)',
  (_what, value) => {
    expect(oneExactPath({ 'nginx.ingress.kubernetes.io/proxy-next-upstream': value })).toThrow(
      /not modelled/,
    );
  },
);

test('When proxy-next-upstream-tries is not a whole number, then the translation refuses it', () => {
  for (const value of ['-1', 'three', '1.5'])
    expect(oneExactPath({ 'nginx.ingress.kubernetes.io/proxy-next-upstream-tries': value })).toThrow(
      /not modelled/,
    );
});

test('When a Prefix path ends in "/", then it also gets an exact location for the path as written (location.go)', () => {
  const conf = translate(
    [
      ingress('general', [{ path: '/', pathType: 'Prefix' }]),
      ingress('docs', [
        { path: '/docs/', pathType: 'Prefix' },
        { path: '/api', pathType: 'Prefix' },
      ]),
    ],
    controller,
    settings,
  );
  expect(conf).toContain('location /docs/ {');
  expect(conf).toContain('location = /docs/ {');
  expect(conf).not.toContain('location = /docs {');
  // Without the slash: the prefix location gains one, the exact one is the path as written.
  expect(conf).toContain('location /api/ {');
  expect(conf).toContain('location = /api {');
});

test("When nginx redirects or proxies, then redirects carry no port, the Server header is cleared and the controller's location-snippet replaces a client's X-Request-ID before the template's map reads it (nginx.tmpl)", () => {
  const conf = translate([auth], controller, settings);
  expect(conf.split('\n')[1]).toBe('load_module /mods/ngx_http_headers_more_filter_module.so;');
  expect(conf).toContain('  server_tokens off;\n  more_clear_headers Server;');
  expect(conf).toContain('  port_in_redirect off;');
  expect(conf).not.toContain('port_in_redirect on');
  expect(conf).toMatch(
    /map \$http_x_request_id \$req_id \{\n\s+default \$http_x_request_id;\n\s+"" \$request_id;/,
  );
  const login = locationBody(conf, '= /login');
  expect(login).toContain('proxy_set_header X-Request-ID $req_id;');
  expect(login).toContain('more_set_input_headers "X-Request-ID: $request_id";');
  expect(conf).not.toContain('proxy_set_header X-Request-ID $request_id');
});

test('When the controller values carry another location-snippet, then the translation refuses it', () => {
  for (const snippet of ['more_set_input_headers "X-Request-ID: $http_x_request_id";', 'return 200;']) {
    expect(() =>
      translate([auth], { controller: { config: { 'location-snippet': snippet } } }, settings),
    ).toThrow(/location-snippet: only more_set_input_headers/);
  }
});
