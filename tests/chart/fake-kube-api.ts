/**
 * A minimal Kubernetes API server for `helm template --dry-run=server`: enough discovery for helm to
 * map the chart's kinds, GET of the objects it is given (so the chart's `lookup` sees them) and 404
 * for everything else. It lets the tests show what an upgrade renders without a cluster.
 */
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { render, template, type HelmResult, type KubeObject, type RenderOptions } from './helm';

/** group/version → the kinds it serves: the kinds the chart renders. */
const discovery: Record<string, string[]> = {
  v1: ['ConfigMap', 'Secret', 'Service', 'ServiceAccount', 'Pod'],
  'apps/v1': ['Deployment', 'StatefulSet'],
  'networking.k8s.io/v1': ['Ingress', 'NetworkPolicy'],
  'autoscaling/v2': ['HorizontalPodAutoscaler'],
  'policy/v1': ['PodDisruptionBudget'],
  // The operators' kinds prod renders (CloudNativePG, its Barman Cloud plugin, the Prometheus Operator).
  'postgresql.cnpg.io/v1': ['Cluster', 'Pooler', 'ScheduledBackup'],
  'barmancloud.cnpg.io/v1': ['ObjectStore'],
  'monitoring.coreos.com/v1': ['PodMonitor', 'PrometheusRule', 'ServiceMonitor'],
};

/** A kind's resource name as the API server serves it: lower case and plural (ingresses, networkpolicies). */
const resourceOf = (kind: string) => `${kind.toLowerCase().replace(/y$/, 'ie').replace(/s$/, 'se')}s`;

const notFound = { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 };

/** The status and body the API server gives for a GET of the path. */
function answer(namespace: string, existing: KubeObject[], path: string): [number, unknown] {
  if (path === '/version')
    return [200, { major: '1', minor: '35', gitVersion: 'v1.35.0', platform: 'linux/amd64' }];
  // Plain (not aggregated) discovery: helm falls back to it.
  if (path === '/api')
    return [200, { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [] }];
  if (path === '/apis') {
    const groups = Object.keys(discovery)
      .filter((groupVersion) => groupVersion.includes('/'))
      .map((groupVersion) => {
        const [name = '', version = ''] = groupVersion.split('/');
        return { name, versions: [{ groupVersion, version }], preferredVersion: { groupVersion, version } };
      });
    return [200, { kind: 'APIGroupList', apiVersion: 'v1', groups }];
  }
  const resourceList = /^\/(?:api\/(v1)|apis\/([^/]+\/[^/]+))$/.exec(path);
  if (resourceList) {
    const groupVersion = resourceList[1] ?? resourceList[2] ?? '';
    const resources = (discovery[groupVersion] ?? []).map((kind) => ({
      name: resourceOf(kind),
      kind,
      singularName: kind.toLowerCase(),
      namespaced: true,
      verbs: ['get', 'list', 'create', 'update', 'patch', 'delete'],
    }));
    return [200, { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources }];
  }
  const objectPath = /^\/(?:api\/v1|apis\/([^/]+\/[^/]+))\/namespaces\/([^/]+)\/([^/]+)(?:\/([^/]+))?$/.exec(
    path,
  );
  if (objectPath) {
    const [, groupVersion = 'v1', inNamespace, resource = '', name] = objectPath;
    const kind = discovery[groupVersion]?.find((served) => resourceOf(served) === resource);
    const matching = existing.filter(
      (object) => object.kind === kind && object.apiVersion === groupVersion && inNamespace === namespace,
    );
    if (name === undefined)
      return [200, { kind: `${kind ?? ''}List`, apiVersion: groupVersion, metadata: {}, items: matching }];
    const found = matching.find((object) => object.metadata.name === name);
    if (found) return [200, found];
  }
  return [404, notFound];
}

/** The server, and the environment for helm: a kubeconfig pointing at it. */
async function startFakeKubeApi(namespace: string, existing: KubeObject[]) {
  const server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://fake').pathname;
    const [status, body] = request.method === 'GET' ? answer(namespace, existing, path) : [404, notFound];
    response.writeHead(status, { 'Content-Type': 'application/json' });
    response.end(JSON.stringify(body));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  const directory = mkdtempSync(join(tmpdir(), 'fake-kube-api-'));
  const kubeconfig = join(directory, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server: `http://127.0.0.1:${port}` } }],
      users: [{ name: 'fake', user: { token: 'fake' } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake', namespace } }],
      'current-context': 'fake',
    }),
    { mode: 0o600 },
  );
  return {
    env: { KUBECONFIG: kubeconfig },
    close: async () => {
      server.close();
      await once(server, 'close');
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** Runs `run` on `options` with helm's lookups answered by a fake API server holding `existing`. */
async function beside<T>(
  existing: KubeObject[],
  options: RenderOptions,
  run: (options: RenderOptions) => Promise<T>,
): Promise<T> {
  const api = await startFakeKubeApi(options.namespace ?? 'social-posts-test', existing);
  try {
    // The fake server serves no OpenAPI documents; the schemas are checked by the other tests.
    return await run({
      ...options,
      env: api.env,
      extraArgs: ['--dry-run=server', '--disable-openapi-validation'],
    });
  } finally {
    await api.close();
  }
}

/** `helm template --dry-run=server` beside a cluster holding `existing`: what `helm upgrade` renders there. */
export const templateBeside = (existing: KubeObject[], options: RenderOptions): Promise<HelmResult> =>
  beside(existing, options, template);

/** The same, parsed; throws with helm's stderr when it refuses. */
export const renderBeside = (existing: KubeObject[], options: RenderOptions): Promise<KubeObject[]> =>
  beside(existing, options, render);
