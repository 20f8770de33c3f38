/** The translation on its own: the mapping the README documents, and loud refusals of anything else. */
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import { translate, type ControllerValues, type NginxSettings } from './nginx-config';

const settings: NginxSettings = {
  prefix: '/tmp/x',
  listenPort: 8080,
  statusPort: 8081,
  generation: 1,
  namespace: 'ns',
  endpoints: () => ['127.0.0.1:9001', '127.0.0.1:9002'],
};
const controller: ControllerValues = { controller: { config: { 'limit-req-status-code': '429' } } };

function ingress(
  name: string,
  paths: { path: string; pathType: 'Exact' | 'Prefix' | 'ImplementationSpecific' }[],
  annotations: Record<string, string> = {},
): IIngress {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name, annotations },
    spec: {
      ingressClassName: 'nginx',
      rules: [
        {
          host: 'api.example',
          http: {
            paths: paths.map((p) => ({
              ...p,
              backend: { service: { name: 'api', port: { name: 'http' } } },
            })),
          },
        },
      ],
    },
  };
}

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

test('maps Exact, Prefix, the limit and the time-outs the way ingress-nginx does', () => {
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
  expect(conf).toContain('location /docs/ {');
  expect(conf).toContain('location = /docs {');
  expect(conf).toContain('proxy_read_timeout 3s;');
  expect(conf).toContain('proxy_pass http://ns-api-http;');
  expect(conf).toContain('server 127.0.0.1:9002 max_fails=0;');
  expect(conf).toContain('server_name api.example;');
});

test('the default burst multiplier is ingress-nginx 5', () => {
  const conf = translate(
    [ingress('a', [{ path: '/a', pathType: 'Exact' }], { 'nginx.ingress.kubernetes.io/limit-rpm': '10' })],
    controller,
    settings,
  );
  expect(conf).toContain('burst=50 nodelay');
});

test.each([
  ['use-regex', { 'nginx.ingress.kubernetes.io/use-regex': 'true' }],
  ['rewrite-target', { 'nginx.ingress.kubernetes.io/rewrite-target': '/' }],
  ['a snippet', { 'nginx.ingress.kubernetes.io/configuration-snippet': 'return 200;' }],
  ['limit-rps', { 'nginx.ingress.kubernetes.io/limit-rps': '1' }],
  ['the legacy class annotation', { 'kubernetes.io/ingress.class': 'nginx' }],
])('refuses %s', (_what, annotations) => {
  expect(() =>
    translate([ingress('x', [{ path: '/x', pathType: 'Exact' }], annotations)], controller, settings),
  ).toThrow(/not modelled/);
});

test('refuses ImplementationSpecific paths, TLS, other classes, duplicate paths and unknown controller settings', () => {
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

test('with no ready endpoint the upstream is the 503 answer of the controller', () => {
  const conf = translate([auth], controller, { ...settings, endpoints: () => [] });
  expect(conf).toContain('server unix:/tmp/x/no-endpoints.sock;');
});
