/** Helpers of the chart tests: run helm from .tools/, render the chart and pick objects out of the output. */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IStatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import type { IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import type { INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import type { IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPod } from 'kubernetes-models/v1/Pod';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import type { ISecret } from 'kubernetes-models/v1/Secret';
import type { IService } from 'kubernetes-models/v1/Service';
import type { IServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { parseManifests, type KubeObject } from '../../tools/harness/manifests';
import type { PrometheusRuleObject } from '../../tools/harness/promql';
import { ensureTools } from '../../tools/tools';

export const repoRoot = resolve(__dirname, '..', '..');
export const chartDir = resolve(repoRoot, 'chart');
export const environments = ['dev', 'staging', 'prod'] as const;
export type Environment = (typeof environments)[number];

/** chart-testing's values files, relative to chart/ (ci/<name>-values.yaml). */
export const ciValuesFiles = readdirSync(resolve(chartDir, 'ci'))
  .filter((file) => file.endsWith('-values.yaml'))
  .map((file) => `ci/${file}`);

export { type KubeObject } from '../../tools/harness/manifests';

export interface HelmResult {
  code: number;
  stdout: string;
  stderr: string;
}

const helmBin = ensureTools().helm;

/** Runs helm asynchronously (a fake API server in this process must keep answering meanwhile). */
function runHelm(args: string[], env: NodeJS.ProcessEnv = {}): Promise<HelmResult> {
  return new Promise((resolvePromise) => {
    execFile(
      helmBin,
      args,
      // No kubeconfig unless a test provides one: rendering must never reach a real cluster.
      { env: { ...process.env, KUBECONFIG: '/dev/null', ...env }, maxBuffer: 32 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolvePromise({ code, stdout, stderr });
      },
    );
  });
}

export interface RenderOptions {
  /** Values files relative to chart/. */
  values?: string[];
  /** --set: helm parses numbers and booleans. */
  set?: Record<string, string>;
  /** --set-string: always strings (annotations). */
  setString?: Record<string, string>;
  /** --set-json: lists and objects (rules, env vars, volumes). */
  setJson?: Record<string, unknown>;
  namespace?: string;
  /** Render values-prod.yaml without the site's values on top (its empty placeholders). */
  withoutSite?: boolean;
  extraArgs?: string[];
  env?: NodeJS.ProcessEnv;
}

/**
 * The site's own values an operator layers on prod's (its bucket, its API server's addresses), which
 * values-prod.yaml leaves empty so that an install without them fails to render.
 */
const prodSiteValues = resolve(__dirname, 'values-prod-site.yaml');

/**
 * The values flags of the options, for `helm lint`, `helm template` and `helm install` alike; prod's
 * file is followed by the site's values unless `withoutSite` asks for prod's file alone.
 */
function valuesArgs(options: RenderOptions = {}): string[] {
  const args: string[] = [];
  for (const file of options.values ?? []) {
    args.push('--values', resolve(chartDir, file));
    if (file === 'values-prod.yaml' && options.withoutSite !== true) args.push('--values', prodSiteValues);
  }
  for (const [key, value] of Object.entries(options.set ?? {})) args.push('--set', `${key}=${value}`);
  for (const [key, value] of Object.entries(options.setString ?? {}))
    args.push('--set-string', `${key}=${value}`);
  for (const [key, value] of Object.entries(options.setJson ?? {}))
    args.push('--set-json', `${key}=${JSON.stringify(value)}`);
  return [...args, ...(options.extraArgs ?? [])];
}

/** Release name (always social-posts, as in chart/README.md and docs/operations.md), chart, namespace and values flags. */
function releaseArgs(options: RenderOptions = {}): string[] {
  const namespace = options.namespace ?? 'social-posts-test';
  return ['social-posts', chartDir, '--namespace', namespace, ...valuesArgs(options)];
}

/** `helm lint --strict` of the chart with the options' values. */
export function lint(options: RenderOptions): Promise<HelmResult> {
  return runHelm(['lint', '--strict', chartDir, ...valuesArgs(options)]);
}

/** helm's own answer, unparsed and without blocking (a fake API server in this process answers its lookups). */
export function template(options: RenderOptions = {}): Promise<HelmResult> {
  return runHelm(['template', ...releaseArgs(options)], options.env);
}

/** The chart rendered and parsed (helm's stderr in the error when it refuses). */
export async function render(options: RenderOptions = {}): Promise<KubeObject[]> {
  const result = await template(options);
  if (result.code !== 0) throw new Error(`helm template failed:\n${result.stderr}`);
  return parseManifests(result.stdout);
}

/** The options an operator uses for an environment (see chart/README.md): the values file alone. */
export function environmentOptions(environment: Environment): RenderOptions {
  return {
    values: [`values-${environment}.yaml`],
    namespace: `social-posts-${environment}`,
  };
}

/** Point-in-time recovery as chart/README.md runs it: prod's values with values-recovery.yaml on top. */
export const recoveryOptions: RenderOptions = {
  values: ['values-prod.yaml', 'values-recovery.yaml'],
  namespace: 'social-posts-prod',
};

/**
 * An environment's values file with `set` (and `more`) on top, in the test namespace: unlike
 * environmentOptions, which is the file as an operator installs it.
 */
export function valuesOf(
  environment: Environment,
  set?: Record<string, string>,
  more: RenderOptions = {},
): RenderOptions {
  return { values: [`values-${environment}.yaml`], set, ...more };
}

const renderedEnvironments = new Map<Environment, Promise<KubeObject[]>>();

/** Renders an environment once per test file. */
export function renderEnvironment(environment: Environment): Promise<KubeObject[]> {
  const rendered = renderedEnvironments.get(environment) ?? render(environmentOptions(environment));
  renderedEnvironments.set(environment, rendered);
  return rendered;
}

/** The objects `load` renders, there once the enclosing block's beforeAll has run. */
export function renderedBeforeAll(load: () => Promise<KubeObject[]>): KubeObject[] {
  const objects: KubeObject[] = [];
  beforeAll(async () => {
    objects.push(...(await load()));
  });
  return objects;
}

type Rendering = [string, () => Promise<KubeObject[]>];

/** Every rendering the schema tests check: the environments, recovery on prod and chart-testing's files. */
export const allRenderings: Rendering[] = [
  ...environments.map((environment): Rendering => [
    `the ${environment} values`,
    () => renderEnvironment(environment),
  ]),
  ["the recovery values (on prod's)", () => render(recoveryOptions)],
  ...ciValuesFiles.map((file): Rendering => [file, () => render({ values: [file] })]),
];

/** The API pods' labels: what the chart's Services, policies and budgets select them by. */
export const apiSelector = {
  'app.kubernetes.io/name': 'social-posts',
  'app.kubernetes.io/instance': 'social-posts',
  'app.kubernetes.io/component': 'api',
};

/** A NetworkPolicy peer: the pods of the namespace `name` (by the label Kubernetes gives every namespace). */
export const namespaced = (name: string) => ({
  namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': name } },
});

/** The egress rule every policy of the chart opens for DNS: kube-dns by its label in any namespace. */
export const kubeDns = {
  to: [{ namespaceSelector: {}, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }],
  ports: [
    { port: 53, protocol: 'UDP' },
    { port: 53, protocol: 'TCP' },
  ],
};

/** The host each environment's values serve the API on. */
export const hosts: Record<Environment, string> = {
  dev: 'social-posts.localtest.me',
  staging: 'staging-api.social-posts.example.com',
  prod: 'api.social-posts.example.com',
};

interface PluginEntry {
  isWALArchiver?: boolean;
  parameters: Record<string, string>;
}

// Custom resources: kubernetes-models has no type for them, so the fields the tests read are spelt out;
// what they only hand to expect whole is left unknown.
export interface Cluster extends KubeObject {
  spec: {
    instances: number;
    imageName?: string;
    bootstrap: { initdb?: Record<string, unknown>; recovery?: Record<string, unknown> };
    postgresql: { parameters: Record<string, string>; synchronous?: unknown };
    certificates?: { serverAltDNSNames: string[] };
    probes?: unknown;
    inheritedMetadata?: unknown;
    serviceAccountTemplate?: unknown;
    externalClusters?: { name: string; plugin?: PluginEntry }[];
    plugins?: PluginEntry[];
  };
}

export interface Pooler extends KubeObject {
  spec: {
    cluster: { name: string };
    instances: number;
    type: string;
    pgbouncer: { poolMode: string; parameters: Record<string, string> };
  };
}

interface ObjectStore extends KubeObject {
  spec: { retentionPolicy: string; configuration: Record<string, unknown> };
}

interface ScheduledBackup extends KubeObject {
  spec: { cluster: { name: string } };
}

interface PodMonitor extends KubeObject {
  spec: { selector: { matchLabels: Record<string, string> }; podMetricsEndpoints: { port: string }[] };
}

interface ServiceMonitor extends KubeObject {
  spec: unknown;
}

export interface HTTPRoute extends KubeObject {
  spec: {
    parentRefs: Record<string, unknown>[];
    hostnames: string[];
    rules: {
      matches: { path: { type: string; value: string } }[];
      backendRefs?: Record<string, unknown>[];
      filters?: Record<string, unknown>[];
      timeouts?: Record<string, string>;
    }[];
  };
}

/** A Gateway implementation's policy: its own fields, attached to routes by targetRefs. */
interface Policy extends KubeObject {
  spec: Record<string, unknown> & { targetRefs: { group: string; kind: string; name: string }[] };
}

/** The kinds the chart renders, each with its kubernetes-models interface or its fields above. */
export interface RenderedKinds {
  BackendTrafficPolicy: Policy;
  Cluster: Cluster;
  HTTPRoute: HTTPRoute;
  ObjectStore: ObjectStore;
  ObservabilityPolicy: Policy;
  PodMonitor: PodMonitor;
  Pooler: Pooler;
  PrometheusRule: PrometheusRuleObject;
  ProxySettingsPolicy: Policy;
  RateLimitPolicy: Policy;
  ScheduledBackup: ScheduledBackup;
  ServiceMonitor: ServiceMonitor;
  ConfigMap: IConfigMap;
  Deployment: IDeployment;
  HorizontalPodAutoscaler: IHorizontalPodAutoscaler;
  Ingress: IIngress;
  NetworkPolicy: INetworkPolicy;
  Pod: IPod;
  PodDisruptionBudget: IPodDisruptionBudget;
  Secret: ISecret;
  Service: IService;
  ServiceAccount: IServiceAccount;
  StatefulSet: IStatefulSet;
}

/** Objects of a kind, typed with its kubernetes-models interface. */
export function findAll<K extends keyof RenderedKinds>(objects: KubeObject[], kind: K): RenderedKinds[K][] {
  // The schema tests validate every rendered object against these very types.
  return objects.filter((object) => object.kind === kind) as unknown as RenderedKinds[K][];
}

/** The one object of a kind (and name, or test, when given); fails loudly when it is missing or ambiguous. */
export function findOne<K extends keyof RenderedKinds>(
  objects: KubeObject[],
  kind: K,
  which?: string | ((object: RenderedKinds[K]) => boolean),
): RenderedKinds[K] {
  const matches = findAll(objects, kind).filter((object) =>
    typeof which === 'string' ? object.metadata?.name === which : (which?.(object) ?? true),
  );
  const [match] = matches;
  if (matches.length !== 1 || match === undefined) {
    throw new Error(
      `expected one ${kind}${typeof which === 'string' ? ` named ${which}` : ''}, found ${matches.length}`,
    );
  }
  return match;
}

/** The Pooler of one type: rw (the primary) or ro (the standbys, cnpg.reads). */
export const pooler = (objects: KubeObject[], type: 'rw' | 'ro'): Pooler =>
  findOne(objects, 'Pooler', (candidate) => candidate.spec.type === type);

/** The API's settings as the pod reads them: the release ConfigMap's data. */
export function configMapData(objects: KubeObject[]): Record<string, string> {
  return must(findOne(objects, 'ConfigMap', 'social-posts').data, 'ConfigMap data');
}

/** Renders with `options`, expects helm to refuse, and returns what it said (the template's fail message first). */
export async function renderRefused(options: RenderOptions): Promise<string> {
  const result = await template(options);
  expect(result.code).not.toBe(0);
  return result.stderr.trim();
}

/**
 * A table of refusals, each row a case named by `title` from its description: helm refuses the row's
 * values (made into options by `options`) with the row's message in what it says (or in the part
 * of it `said` keeps).
 */
export function refusedEach<Given>(rows: [string, Given, string][]) {
  return (title: string, options: (given: Given) => RenderOptions, said = (stderr: string) => stderr) => {
    it.each(rows)(title, async (_case, given, message) => {
      expect(said(await renderRefused(options(given)))).toContain(message);
    });
  };
}

/** The API pods' spec: the Deployment's pod template. */
export function podSpec(objects: KubeObject[]): IPodSpec {
  return must(findOne(objects, 'Deployment').spec?.template.spec, 'pod spec');
}

/** The annotations of the API pods' template (the checksums that roll them among them). */
export function podAnnotations(objects: KubeObject[]): Record<string, string> {
  return findOne(objects, 'Deployment').spec?.template.metadata?.annotations ?? {};
}

/** The API container of the Deployment's pods. */
export function apiContainer(objects: KubeObject[]): IContainer {
  return must(podSpec(objects).containers[0], 'API container');
}

/** A Dockerfile's (or .dockerignore's) instructions: continuation lines joined, comments dropped. */
export function instructions(text: string): string[] {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

export const dockerfile = instructions(readFileSync(resolve(repoRoot, 'Dockerfile'), 'utf8'));

/** The Dockerfile's stages in order: each one's name (after AS) and instructions, its FROM first. */
export const dockerfileStages = dockerfile.reduce<[string, string[]][]>((stages, line) => {
  if (line.startsWith('FROM ')) stages.push([/ AS (\S+)$/.exec(line)?.[1] ?? '', []]);
  stages.at(-1)?.[1].push(line);
  return stages;
}, []);

/** A Secret's value of `key`, decoded. */
export function decode(secret: ISecret, key: string): string {
  return Buffer.from(must(secret.data?.[key], `Secret key ${key}`), 'base64').toString('utf8');
}

/** NOTES.txt as `helm install` prints it (client-side dry run: helm template renders no notes). */
export async function installNotes(options: RenderOptions): Promise<string> {
  const result = await runHelm(['install', ...releaseArgs(options), '--dry-run=client', '--output', 'json']);
  if (result.code !== 0) throw new Error(result.stderr);
  return must((JSON.parse(result.stdout) as { info?: { notes?: string } }).info?.notes, 'release notes');
}

/** Narrows an optional field the test expects to be there. */
export function must<T>(value: T | null | undefined, what: string): T {
  if (value === undefined || value === null) throw new Error(`missing: ${what}`);
  return value;
}
