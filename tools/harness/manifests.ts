/** Rendered Kubernetes objects: `helm template` run and its output parsed, for the chart tests and k8s:local alike. */
import { spawnSync } from 'node:child_process';
import { parseAllDocuments } from 'yaml';

/** What every rendered Kubernetes object has; kinds are narrowed from it (kubernetes-models interfaces, CRD shapes). */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
}

/** A Secret as the API serves it (a name alone stands for its metadata): each value of `data` base64-encoded. */
export function secretObject(
  metadata: KubeObject['metadata'] | string,
  type: string,
  data: Record<string, string | Buffer>,
): KubeObject & { type: string; data: Record<string, string> } {
  const encoded = Object.entries(data).map(
    ([key, value]) => [key, Buffer.from(value).toString('base64')] as const,
  );
  const meta = typeof metadata === 'string' ? { name: metadata } : metadata;
  return { apiVersion: 'v1', kind: 'Secret', metadata: meta, type, data: Object.fromEntries(encoded) };
}

/** The objects of a YAML stream, empty documents left out; throws on a document that does not parse. */
export function parseManifests(text: string): KubeObject[] {
  return parseAllDocuments(text)
    .map((document) => {
      if (document.errors.length > 0)
        throw new Error(`rendered YAML does not parse: ${document.errors[0]?.message ?? ''}`);
      return document.toJS() as KubeObject | null;
    })
    .filter((object): object is KubeObject => object !== null);
}

/**
 * `helm template <args>` run with the binary `helm`, parsed; throws with helm's stderr when it refuses.
 * Synchronous (k8s-tests render at module load): a Kubernetes API served by the caller cannot answer it.
 */
export function helmTemplate(helm: string, args: string[], env: NodeJS.ProcessEnv = {}): KubeObject[] {
  const result = spawnSync(helm, ['template', ...args], {
    // No kubeconfig unless the caller gives one: rendering must never reach a real cluster.
    env: { ...process.env, KUBECONFIG: '/dev/null', ...env },
    encoding: 'utf8',
    maxBuffer: 32 * 1024 * 1024,
  });
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`helm template failed:\n${result.stderr}`);
  return parseManifests(result.stdout);
}
