/** What every rendered Kubernetes object has; the runner's modules narrow kinds from it. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; annotations?: Record<string, string> };
}
