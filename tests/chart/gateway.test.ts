/**
 * gateway.enabled: HTTPRoutes instead of the Ingress objects, with the rate limit and time-outs as
 * policies of the implementation named in gateway.rateLimit.implementation. Every object is checked
 * against the Gateway API models and the implementation's own CRD schema (tests/chart/schemas/).
 */
import {
  environmentOptions,
  environments,
  findAll,
  findOne,
  hosts,
  lint,
  render,
  renderedBeforeAll,
  type Environment,
  type HTTPRoute,
  type KubeObject,
  type RenderOptions,
} from './helm';
import { schemaProblems, unknownFieldProblems } from './kubernetes-schemas';

const implementations = ['nginx-gateway-fabric', 'envoy-gateway', 'none'] as const;
type Implementation = (typeof implementations)[number];

const parentRef = { name: 'shared', namespace: 'gateway-system', sectionName: 'https' };

function gatewayOptions(
  environment: Environment,
  implementation: Implementation,
  set: Record<string, string> = {},
): RenderOptions {
  return {
    ...environmentOptions(environment),
    set: {
      'gateway.enabled': 'true',
      'gateway.parentRef.name': parentRef.name,
      'gateway.parentRef.namespace': parentRef.namespace,
      'gateway.parentRef.sectionName': parentRef.sectionName,
      'gateway.rateLimit.implementation': implementation,
      ...set,
    },
  };
}

const route = (objects: KubeObject[], name: string) => findOne(objects, 'HTTPRoute', name);

function paths(r: HTTPRoute): string[] {
  return r.spec.rules.flatMap((rule) => rule.matches.map((m) => `${m.path.type} ${m.path.value}`));
}

const cases = environments.flatMap((environment) =>
  implementations.map((implementation): [Environment, Implementation] => [environment, implementation]),
);

describe.each(cases)('Gateway API objects of %s with %s', (environment, implementation) => {
  const objects = renderedBeforeAll(() => render(gatewayOptions(environment, implementation)));

  it('When gateway.enabled is true, then no Ingress is rendered and two HTTPRoutes attach to the given Gateway on the environment host', () => {
    expect(findAll(objects, 'Ingress')).toEqual([]);
    const routes = findAll(objects, 'HTTPRoute');
    expect(routes.map((r) => r.metadata.name).sort()).toEqual(['social-posts', 'social-posts-auth']);
    for (const r of routes) {
      expect(r.spec.parentRefs).toEqual([
        { group: 'gateway.networking.k8s.io', kind: 'Gateway', ...parentRef },
      ]);
      expect(r.spec.hostnames).toEqual([hosts[environment]]);
      for (const rule of r.spec.rules.filter((entry) => entry.filters === undefined))
        expect(rule.backendRefs).toEqual([{ group: '', kind: 'Service', name: 'social-posts', port: 80 }]);
    }
  });

  it('When gateway.enabled is true, then the auth route serves exactly Exact /login and Exact /users/, the general route PathPrefix /', () => {
    const auth = route(objects, 'social-posts-auth');
    expect(paths({ ...auth, spec: { ...auth.spec, rules: auth.spec.rules.slice(0, 1) } })).toEqual([
      'Exact /login',
      'Exact /users/',
    ]);
    expect(paths(route(objects, 'social-posts'))).toEqual(['PathPrefix /']);
  });

  it('When gateway.enabled is true, then Exact /users is a 308 redirect to /users/ inside the limited route, with no backend', () => {
    const redirect = route(objects, 'social-posts-auth').spec.rules[1];
    expect(redirect).toEqual({
      matches: [{ path: { type: 'Exact', value: '/users' } }],
      filters: [
        {
          type: 'RequestRedirect',
          requestRedirect: { path: { type: 'ReplaceFullPath', replaceFullPath: '/users/' }, statusCode: 308 },
        },
      ],
    });
    expect(route(objects, 'social-posts-auth').spec.rules).toHaveLength(2);
  });

  it('When gateway.enabled is true, then helm lint --strict reports no warning or error', async () => {
    const result = await lint(gatewayOptions(environment, implementation));
    expect(result.stdout + result.stderr).toContain('0 chart(s) failed');
    expect(result.code).toBe(0);
  });

  it('When gateway.enabled is true, then every object is valid against its Gateway API, Kubernetes or CRD schema and has no unknown field', () => {
    expect(schemaProblems(objects)).toEqual([]);
    expect(unknownFieldProblems(objects)).toEqual([]);
  });

  it('When gateway.enabled is true, then the limit and the 3-second time-outs are expressed for the implementation', () => {
    const policies = [
      ...findAll(objects, 'RateLimitPolicy'),
      ...findAll(objects, 'ProxySettingsPolicy'),
      ...findAll(objects, 'BackendTrafficPolicy'),
    ];
    const target = (name: string) => ({ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name });
    const routeTimeouts = findAll(objects, 'HTTPRoute').map((r) => r.spec.rules[0]?.timeouts);
    switch (implementation) {
      case 'nginx-gateway-fabric':
        expect(policies.map((p) => `${p.kind} ${p.metadata.name}`)).toEqual([
          'RateLimitPolicy social-posts-auth',
          'ProxySettingsPolicy social-posts',
        ]);
        expect(policies[0]?.spec).toEqual({
          targetRefs: [target('social-posts-auth')],
          rateLimit: {
            rejectCode: 429,
            local: { rules: [{ key: '$binary_remote_addr', rate: '10r/m', burst: 10, noDelay: true }] },
          },
        });
        expect(policies[1]?.spec).toEqual({
          targetRefs: [target('social-posts-auth'), target('social-posts')],
          timeout: { connect: '5s', read: '3s', send: '3s' },
        });
        // NGINX Gateway Fabric ignores HTTPRoute timeouts: the policy carries them instead.
        expect(routeTimeouts).toEqual([undefined, undefined]);
        break;
      case 'envoy-gateway': {
        expect(policies.map((p) => `${p.kind} ${p.metadata.name}`).sort()).toEqual([
          'BackendTrafficPolicy social-posts',
          'BackendTrafficPolicy social-posts-auth',
        ]);
        const perAddress = (value: string) => ({
          clientSelectors: [{ sourceCIDR: { type: 'Distinct', value } }],
          limit: { requests: 10, unit: 'Minute' },
        });
        expect(findOne(objects, 'BackendTrafficPolicy', 'social-posts-auth').spec).toEqual({
          targetRefs: [target('social-posts-auth')],
          rateLimit: { local: { rules: [perAddress('0.0.0.0/0'), perAddress('::/0')] } },
          timeout: { tcp: { connectTimeout: '5s' } },
        });
        expect(findOne(objects, 'BackendTrafficPolicy', 'social-posts').spec).toEqual({
          targetRefs: [target('social-posts')],
          timeout: { tcp: { connectTimeout: '5s' } },
        });
        expect(routeTimeouts).toEqual([{ backendRequest: '3s' }, { backendRequest: '3s' }]);
        break;
      }
      case 'none':
        expect(policies).toEqual([]);
        expect(routeTimeouts).toEqual([{ backendRequest: '3s' }, { backendRequest: '3s' }]);
        break;
    }
  });
});

describe('Gateway switches and refusals', () => {
  it('When gateway.enabled is left at its default, then no HTTPRoute or policy is rendered and the Ingress objects are', async () => {
    const objects = await render(environmentOptions('dev'));
    const gatewayKinds = objects.filter((o) =>
      /gateway\.(networking\.k8s\.io|nginx\.org|envoyproxy\.io)\//.test(o.apiVersion),
    );
    expect(gatewayKinds).toEqual([]);
    expect(findAll(objects, 'Ingress')).toHaveLength(2);
  });

  it('When envoyMode is Global, then the auth policy uses the global (Redis-backed) limit shared by both paths and stays schema-valid', async () => {
    const objects = await render(
      gatewayOptions('prod', 'envoy-gateway', { 'gateway.rateLimit.envoyMode': 'Global' }),
    );
    const auth = findOne(objects, 'BackendTrafficPolicy', 'social-posts-auth');
    const rateLimit = auth.spec.rateLimit as { global?: { rules: { shared?: boolean }[] }; local?: unknown };
    expect(rateLimit.local).toBeUndefined();
    expect(rateLimit.global?.rules.map((rule) => rule.shared)).toEqual([true, true]);
    expect(schemaProblems(objects)).toEqual([]);
  });

  it('When a policy or route breaks its schema, then the checks report it (the validators are live)', () => {
    const policy = {
      apiVersion: 'gateway.nginx.org/v1alpha1',
      kind: 'RateLimitPolicy',
      metadata: { name: 'x' },
      spec: {
        targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'x' }],
        rateLimit: {
          rejectCode: 200,
          local: { rules: [{ key: '$binary_remote_addr', rate: '10 per minute', noDelays: true }] },
        },
      },
    };
    const problems = schemaProblems([policy]);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringContaining('/spec/rateLimit/rejectCode'),
        expect.stringContaining('/spec/rateLimit/local/rules/0/rate'),
        expect.stringContaining('(noDelays)'),
      ]),
    );
    // NGF's ObservabilityPolicy: ratio is a whole percent up to 100, strategy ratio or parent.
    const observability = {
      apiVersion: 'gateway.nginx.org/v1alpha2',
      kind: 'ObservabilityPolicy',
      metadata: { name: 'z' },
      spec: {
        targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'z' }],
        tracing: { strategy: 'always', ratio: 0.25, sampling: 'ratio' },
      },
    };
    expect(schemaProblems([observability])).toEqual(
      expect.arrayContaining([
        expect.stringContaining('/spec/tracing/strategy'),
        expect.stringContaining('/spec/tracing/ratio'),
        expect.stringContaining('(sampling)'),
      ]),
    );
    const badRoute = {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'HTTPRoute',
      metadata: { name: 'y' },
      spec: { rules: [{ matches: [{ path: { type: 'Prefix', value: '/' } }] }] },
    };
    expect(schemaProblems([badRoute as KubeObject])).toEqual([expect.stringContaining('path/type')]);
    // The HTTPRoute CRD is closed against unknown fields: a misspelt field is named.
    expect(schemaProblems([{ ...badRoute, spec: { hostname: ['a'] } } as KubeObject])).toEqual([
      expect.stringContaining('(hostname)'),
    ]);
    expect(
      schemaProblems([
        { ...badRoute, metadata: { name: 'y', labels: 'a' }, spec: {} } as unknown as KubeObject,
      ]),
    ).toEqual([expect.stringContaining('metadata')]);
    expect(
      unknownFieldProblems([{ ...badRoute, metadata: { name: 'y', label: {} }, spec: {} } as KubeObject]),
    ).toEqual([expect.stringContaining('\'"label"\' does not exist')]);
  });
});
