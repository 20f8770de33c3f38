import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import { environments, findAll, findOne, hosts, must, render, renderEnvironment } from './helm';

function paths(ingress: IIngress): { path?: string; pathType: string; service?: string; port?: string }[] {
  const rules = must(ingress.spec?.rules, 'rules');
  return rules.flatMap((rule) =>
    must(rule.http, 'http').paths.map((entry) => ({
      path: entry.path,
      pathType: entry.pathType,
      service: entry.backend.service?.name,
      port: entry.backend.service?.port?.name,
    })),
  );
}

describe.each(environments)('Ingress objects of %s', (environment) => {
  let auth: IIngress;
  let general: IIngress;
  let all: IIngress[];

  beforeAll(async () => {
    const objects = await renderEnvironment(environment);
    all = findAll(objects, 'Ingress');
    auth = findOne(objects, 'Ingress', 'social-posts-auth');
    general = findOne(objects, 'Ingress', 'social-posts');
  });

  it(`When the ${environment} values are rendered, then there are exactly two Ingress objects, both of class nginx on the environment's host`, () => {
    expect(all).toHaveLength(2);
    for (const ingress of all) {
      expect(ingress.spec?.ingressClassName).toBe('nginx');
      expect(ingress.spec?.rules?.map((rule) => rule.host)).toEqual([hosts[environment]]);
    }
  });

  it(`When the ${environment} values are rendered, then the auth Ingress has exactly /login and /users/ as Exact paths to the API Service`, () => {
    expect(paths(auth)).toEqual([
      { path: '/login', pathType: 'Exact', service: 'social-posts', port: 'http' },
      { path: '/users/', pathType: 'Exact', service: 'social-posts', port: 'http' },
    ]);
  });

  it(`When the ${environment} values are rendered, then the auth Ingress allows 10 requests per minute with a burst multiplier of 1`, () => {
    expect(auth.metadata?.annotations).toMatchObject({
      'nginx.ingress.kubernetes.io/limit-rpm': '10',
      'nginx.ingress.kubernetes.io/limit-burst-multiplier': '1',
    });
  });

  it(`When the ${environment} values are rendered, then the general Ingress routes / as Prefix and is not rate limited`, () => {
    expect(paths(general)).toEqual([
      { path: '/', pathType: 'Prefix', service: 'social-posts', port: 'http' },
    ]);
    const limits = Object.keys(general.metadata?.annotations ?? {}).filter((key) => key.includes('/limit-'));
    expect(limits).toEqual([]);
  });

  it(`When the ${environment} values are rendered, then both Ingress objects carry the 3-second upstream time-outs and a connect time-out`, () => {
    for (const ingress of all)
      expect(ingress.metadata?.annotations).toMatchObject({
        'nginx.ingress.kubernetes.io/proxy-read-timeout': '3',
        'nginx.ingress.kubernetes.io/proxy-send-timeout': '3',
        'nginx.ingress.kubernetes.io/proxy-connect-timeout': expect.stringMatching(
          /^[1-9][0-9]*$/,
        ) as unknown,
      });
  });

  it(`When the ${environment} values are rendered, then both Ingress objects retry another replica only on a connection error, never after a time-out`, () => {
    for (const ingress of all)
      expect(ingress.metadata?.annotations).toMatchObject({
        'nginx.ingress.kubernetes.io/proxy-next-upstream': 'error',
        'nginx.ingress.kubernetes.io/proxy-next-upstream-tries': '3',
      });
  });

  it(`When the ${environment} values are rendered, then no Ingress uses regex, rewrite or snippet annotations (they would make Exact paths case-insensitive regex prefixes)`, () => {
    for (const ingress of all)
      for (const key of Object.keys(ingress.metadata?.annotations ?? {}))
        expect(key).not.toMatch(/use-regex|rewrite-target|snippet/);
  });

  it(`When the ${environment} values are rendered, then TLS is ${environment === 'dev' ? 'off' : 'on'} for the host on both Ingress objects`, () => {
    const tls = [{ hosts: [hosts[environment]], secretName: 'social-posts-tls' }];
    for (const ingress of all)
      if (environment === 'dev') expect(ingress.spec?.tls).toBeUndefined();
      else expect(ingress.spec?.tls).toEqual(tls);
  });
});

describe('Ingress switches', () => {
  it('When ingress.enabled is false, then no Ingress is rendered', async () => {
    const objects = await render({ values: ['values-dev.yaml'], set: { 'ingress.enabled': 'false' } });
    expect(findAll(objects, 'Ingress')).toEqual([]);
  });

  it('When extra annotations and a TLS secret name are given, then both Ingress objects carry them and keep the limits', async () => {
    const objects = await render({
      values: ['values-dev.yaml'],
      set: { 'ingress.tls.enabled': 'true', 'ingress.tls.secretName': 'my-cert' },
      setString: { 'ingress.annotations.cert-manager\\.io/cluster-issuer': 'letsencrypt' },
    });
    for (const ingress of findAll(objects, 'Ingress')) {
      expect(ingress.metadata?.annotations?.['cert-manager.io/cluster-issuer']).toBe('letsencrypt');
      expect(ingress.spec?.tls?.[0]?.secretName).toBe('my-cert');
    }
    const auth = findOne(objects, 'Ingress', 'social-posts-auth');
    expect(auth.metadata?.annotations?.['nginx.ingress.kubernetes.io/limit-rpm']).toBe('10');
  });
});
