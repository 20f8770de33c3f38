/**
 * Renders the chart with `helm template` (dev values plus k8s-tests/values-e2e.yaml) and reads out
 * what the local emulation runs: the Ingress objects, the API container's environment (ConfigMap and
 * Secret, as the kubelet would assemble it) and its probes.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse } from 'yaml';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import type { IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import type { IProbe } from 'kubernetes-models/v1/Probe';
import type { ISecret } from 'kubernetes-models/v1/Secret';
import type { IService } from 'kubernetes-models/v1/Service';
import { cnpgObjects, type CnpgCluster, type CnpgPooler } from './cnpg';
import type { GatewayObject, NginxGatewayFabricValues } from './gateway-config';
import { helmTemplate, type KubeObject } from '../../tools/harness/manifests';

export const repoRoot = resolve(__dirname, '..', '..');
export const releaseName = 'social-posts';
export const namespace = 'social-posts-dev';
/** The same files the kind target installs with. */
const valuesFiles = [
  resolve(repoRoot, 'chart/values-dev.yaml'),
  resolve(repoRoot, 'k8s-tests/values-e2e.yaml'),
];

export type { KubeObject };

/** A YAML file of this checkout, parsed. */
export const readYaml = (file: string): unknown => parse(readFileSync(resolve(repoRoot, file), 'utf8'));

/** What the Gateway translation reads besides the chart: k8s-tests/gateway.yaml and NGINX Gateway Fabric's values. */
export const gatewayInputs = () => ({
  gateway: readYaml('k8s-tests/gateway.yaml') as GatewayObject,
  values: readYaml('k8s-tests/nginx-gateway-fabric-values.yaml') as NginxGatewayFabricValues,
});

export interface ProbeTiming {
  path: string;
  periodSeconds: number;
  timeoutSeconds: number;
  failureThreshold: number;
  successThreshold: number;
}

export interface Release {
  ingresses: IIngress[];
  service: IService;
  replicas: number;
  containerPort: number;
  /** Every port the container declares (the API's, the metrics listener's…). */
  containerPorts: number[];
  /** The API container's environment as rendered (before the runner rewrites hosts and ports). */
  env: Record<string, string>;
  readiness: ProbeTiming;
  liveness: ProbeTiming;
  startup: ProbeTiming;
  database: { host: string; port: number; name: string; user: string; password: string };
  /** The read endpoint (DB_READ_HOSTNAME, DB_READ_PORT) when the release reads on standbys. */
  readDatabase?: { host: string; port: number };
  /** The rendered pod spec and API container, for what a container runtime applies (security, limits, mounts). */
  podSpec: IPodSpec;
  container: IContainer;
  /** Secret name → key → content, for the pod's Secret volumes (the rendered ones and the operator's). */
  secrets: Record<string, Record<string, Buffer>>;
  /** CloudNativePG's Cluster and the Pooler the service dials, when the release renders them. */
  cnpg?: { cluster: CnpgCluster; pooler: CnpgPooler; readPooler?: CnpgPooler };
}

/**
 * Values files beyond valuesFiles (the --gateway run adds k8s-tests/values-e2e-gateway.yaml), and
 * single values over them as strings (`--set-string`); `chart` a packaged chart (one pulled from a
 * registry) instead of this checkout's folder.
 */
export function renderChart(
  helm: string,
  extraValuesFiles: string[] = [],
  strings: Record<string, string> = {},
  chart = resolve(repoRoot, 'chart'),
): KubeObject[] {
  const args = [releaseName, chart, '--namespace', namespace];
  for (const file of [...valuesFiles, ...extraValuesFiles.map((f) => resolve(repoRoot, f))])
    args.push('--values', file);
  for (const [key, value] of Object.entries(strings)) args.push('--set-string', `${key}=${value}`);
  return helmTemplate(helm, args);
}

function one(objects: KubeObject[], kind: string, name: string): unknown {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found) throw new Error(`the rendered chart has no ${kind} ${name}`);
  return found;
}

function probe(given: IProbe | undefined, what: string): ProbeTiming {
  const path = given?.httpGet?.path;
  if (!given || !path) throw new Error(`the API container has no httpGet ${what} probe`);
  return {
    path,
    // Kubernetes' defaults for fields the chart leaves out.
    periodSeconds: given.periodSeconds ?? 10,
    timeoutSeconds: given.timeoutSeconds ?? 1,
    failureThreshold: given.failureThreshold ?? 3,
    successThreshold: given.successThreshold ?? 1,
  };
}

/**
 * `provided`: objects an operator makes at run time, which the chart only names (CloudNativePG's
 * <cluster>-app and <cluster>-ca Secrets).
 */
export function readRelease(rendered: KubeObject[], provided: KubeObject[] = []): Release {
  const objects = [...rendered, ...provided];
  const deployment = one(objects, 'Deployment', releaseName) as IDeployment;
  const service = one(objects, 'Service', releaseName) as IService;
  const podSpec = deployment.spec?.template.spec;
  const container = podSpec?.containers[0];
  if (!podSpec || !container || podSpec.containers.length !== 1)
    throw new Error('expected one API container in the Deployment');
  const containerPort = container.ports?.find((p) => p.name === 'http')?.containerPort;
  if (containerPort === undefined) throw new Error('the API container has no port named http');

  // The environment as the kubelet assembles it: envFrom first, then env entries.
  const env: Record<string, string> = {};
  for (const source of container.envFrom ?? []) {
    const name = source.configMapRef?.name;
    if (!name || source.secretRef || source.prefix) throw new Error('only envFrom configMapRef is modelled');
    Object.assign(env, (one(objects, 'ConfigMap', name) as IConfigMap).data ?? {});
  }
  for (const variable of container.env ?? []) {
    if (variable.value !== undefined) {
      env[variable.name] = variable.value;
      continue;
    }
    const ref = variable.valueFrom?.secretKeyRef;
    if (!ref?.name) throw new Error(`env ${variable.name}: only value and secretKeyRef are modelled`);
    const data = (one(objects, 'Secret', ref.name) as ISecret).data ?? {};
    const encoded = data[ref.key];
    if (encoded === undefined) throw new Error(`Secret ${ref.name} has no key ${ref.key}`);
    env[variable.name] = Buffer.from(encoded, 'base64').toString('utf8');
  }
  if (env.PORT !== String(containerPort))
    throw new Error(`PORT ${String(env.PORT)} is not the container port`);

  const database = {
    host: env.DB_HOSTNAME ?? '',
    port: Number(env.DB_PORT),
    name: env.DB_NAME ?? '',
    user: env.DB_USERNAME ?? '',
    password: env.DB_PASSWORD ?? '',
  };
  // The emulation stands in for the in-chart PostgreSQL or for CloudNativePG's Pooler; an external
  // host would be a different test.
  const cnpg = cnpgObjects(rendered);
  const readDatabase = env.DB_READ_HOSTNAME
    ? { host: env.DB_READ_HOSTNAME, port: Number(env.DB_READ_PORT ?? env.DB_PORT) }
    : undefined;
  if (cnpg) {
    if (database.host !== cnpg.pooler.metadata.name)
      throw new Error(
        `DB_HOSTNAME ${database.host} is not the Pooler's Service ${cnpg.pooler.metadata.name}`,
      );
    // Reads on standbys are modelled through the ro Pooler (the -ro Service alone is not).
    if (readDatabase?.host !== cnpg.readPooler?.metadata.name)
      throw new Error(
        `DB_READ_HOSTNAME ${String(readDatabase?.host)} is not the ro Pooler's Service ${String(cnpg.readPooler?.metadata.name)}`,
      );
  } else {
    one(objects, 'Service', database.host);
    one(objects, 'StatefulSet', database.host);
  }
  const secrets: Release['secrets'] = {};
  for (const secret of objects.filter((o) => o.kind === 'Secret') as unknown as ISecret[])
    secrets[secret.metadata?.name ?? ''] = Object.fromEntries(
      Object.entries(secret.data ?? {}).map(([key, value]) => [key, Buffer.from(value, 'base64')]),
    );

  return {
    ingresses: objects.filter((o) => o.kind === 'Ingress') as unknown as IIngress[],
    service,
    replicas: deployment.spec?.replicas ?? 1,
    containerPort,
    containerPorts: (container.ports ?? []).map((p) => p.containerPort),
    env,
    readiness: probe(container.readinessProbe, 'readiness'),
    liveness: probe(container.livenessProbe, 'liveness'),
    startup: probe(container.startupProbe, 'startup'),
    database,
    ...(readDatabase ? { readDatabase } : {}),
    podSpec,
    container,
    secrets,
    cnpg,
  };
}

/** Whether a Service port (by name or number) leads to the API container's http port. */
export function servesApi(release: Release, service: string, port: string | number): boolean {
  if (service !== release.service.metadata?.name) return false;
  const servicePort = release.service.spec?.ports?.find((p) => p.name === port || p.port === port);
  return servicePort?.targetPort === 'http' || servicePort?.targetPort === release.containerPort;
}
