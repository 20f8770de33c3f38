import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import Ajv from 'ajv';
import { parse } from 'yaml';
import {
  apiContainer,
  configMapData,
  dockerfileStages,
  environments,
  render,
  repoRoot,
  type Environment,
} from './helm';

interface HelmRelease {
  name: string;
  chartPath?: string;
  namespace?: string;
  valuesFiles?: string[];
  setValues?: Record<string, string>;
  setValueTemplates?: Record<string, string>;
}
interface SyncRule {
  src: string;
  dest: string;
  strip?: string;
}
// An artifact and a verify case are compared whole but for the fields below.
interface Artifact {
  docker?: { target?: string };
  sync?: { manual?: SyncRule[] };
}
interface VerifyTestCase {
  container: { image: string; env?: { name: string; value?: string }[] };
  executionMode?: unknown;
}
interface Patch {
  op: string;
  path: string;
  value?: unknown;
}
interface Profile {
  name: string;
  activation?: { command?: string }[];
  patches?: Patch[];
}
interface SkaffoldConfig {
  apiVersion: string;
  build: { artifacts: Artifact[] };
  deploy: { helm: { releases: HelmRelease[] } };
  // Compared whole, never read field by field.
  portForward: unknown[];
  verify?: VerifyTestCase[];
  profiles: Profile[];
}

const config = parse(readFileSync(resolve(repoRoot, 'skaffold.yaml'), 'utf8')) as SkaffoldConfig;

function profile(name: string): Profile {
  const found = config.profiles.find((entry) => entry.name === name);
  if (!found) throw new Error(`no skaffold profile ${name}`);
  return found;
}

/** RFC 6901: the path's tokens, `~1` and `~0` unescaped. */
function pointer(path: string): string[] {
  if (!path.startsWith('/')) throw new Error(`not a JSON pointer: ${path}`);
  return path
    .slice(1)
    .split('/')
    .map((token) => token.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** RFC 6902's add, replace and remove (the ops skaffold.yaml uses), on a copy of the document. */
function applyPatches<T>(document: T, patches: Patch[]): T {
  const result = structuredClone(document) as unknown;
  for (const patch of patches) {
    const tokens = pointer(patch.path);
    const last = tokens.pop();
    if (last === undefined) throw new Error(`patch of the whole document: ${patch.path}`);
    let parent = result as Record<string, unknown> | unknown[];
    for (const token of tokens) {
      const next = (parent as Record<string, unknown>)[token];
      if (typeof next !== 'object' || next === null) throw new Error(`${patch.path}: no ${token}`);
      parent = next as Record<string, unknown> | unknown[];
    }
    if (Array.isArray(parent)) {
      const index = last === '-' ? parent.length : Number(last);
      if (!Number.isInteger(index) || index < 0 || index > parent.length)
        throw new Error(`${patch.path}: no index ${last}`);
      if (patch.op !== 'add' && index >= parent.length) throw new Error(`${patch.path}: no index ${last}`);
      if (patch.op === 'add') parent.splice(index, 0, patch.value);
      else if (patch.op === 'replace') parent[index] = patch.value;
      else if (patch.op === 'remove') parent.splice(index, 1);
      else throw new Error(`unsupported op ${patch.op}`);
    } else {
      if (patch.op !== 'add' && !(last in parent)) throw new Error(`${patch.path}: nothing to ${patch.op}`);
      if (patch.op === 'add' || patch.op === 'replace') parent[last] = patch.value;
      else if (patch.op === 'remove') Reflect.deleteProperty(parent, last);
      else throw new Error(`unsupported op ${patch.op}`);
    }
  }
  return result as T;
}

/** What skaffold runs with `-p <name>`: the top level with that profile's patches applied. */
function effective(name: string): SkaffoldConfig {
  return applyPatches(config, profile(name).patches ?? []);
}

const stages = new Map(dockerfileStages);
const lastStage = dockerfileStages.at(-1)?.[0];

/** skaffold's manual sync (pkg/skaffold/sync/sync.go): the container path of a changed file, or none. */
function syncDestination(rules: SyncRule[], file: string, workdir: string): string | undefined {
  for (const rule of rules) {
    const pattern = rule.src
      .split('**')
      .map((part) =>
        part
          .split('*')
          .map((text) => text.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
          .join('[^/]*'),
      )
      .join('.*');
    if (!new RegExp(`^${pattern}$`).test(file)) continue;
    const base = rule.dest.startsWith('/') ? rule.dest : `${workdir}/${rule.dest}`;
    const sub = rule.strip && file.startsWith(rule.strip) ? file.slice(rule.strip.length) : file;
    return `${base.replace(/\/+$/, '')}/${sub}`;
  }
  return undefined;
}

describe('skaffold.yaml against the published schema', () => {
  // Vendored copy of skaffold's v4beta14 schema (provenance: tests/chart/schemas/README.md).
  const schema = JSON.parse(
    readFileSync(resolve(__dirname, 'schemas', 'skaffold-v4beta14.json'), 'utf8'),
  ) as object;
  // strict: false because the schema carries skaffold's own keywords (x-intellij-html-description, preferredOrder).
  const validate = new Ajv({ strict: false, allErrors: true }).compile(schema);

  it('When skaffold.yaml is validated, then it is a valid skaffold/v4beta14 configuration', () => {
    expect(config.apiVersion).toBe('skaffold/v4beta14');
    const valid = validate(config);
    expect(validate.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it.each(config.profiles.map((entry) => entry.name))(
    'When the %s profile is applied, then the configuration skaffold runs is still valid',
    (name) => {
      const valid = validate(effective(name));
      expect(validate.errors ?? []).toEqual([]);
      expect(valid).toBe(true);
    },
  );

  it('When a misspelt key is added, then the schema refuses it (the validation is live)', () => {
    const broken = structuredClone(config) as SkaffoldConfig & { deploy: { helm: { relases?: unknown } } };
    broken.deploy.helm.relases = [];
    expect(validate(broken)).toBe(false);
  });
});

describe('skaffold build and deploy', () => {
  it('When skaffold builds without a profile, then the API artifact is the Dockerfile at the repository root, its default (production) stage', () => {
    expect(config.build.artifacts[0]).toEqual({
      image: 'social-posts',
      context: '.',
      docker: { dockerfile: 'Dockerfile' },
    });
    expect(lastStage).toBe('runtime');
  });

  it('When the release is read, then it is written once: no profile carries a release, a port-forward or a build of its own', () => {
    for (const entry of config.profiles) {
      expect(Object.keys(entry).filter((key) => !['name', 'activation', 'patches'].includes(key))).toEqual(
        [],
      );
    }
  });

  const configs: [string, SkaffoldConfig, Environment][] = [
    ['no profile', config, 'dev'],
    ...environments.map((environment): [string, SkaffoldConfig, Environment] => [
      `the ${environment} profile`,
      effective(environment),
      environment,
    ]),
  ];

  it.each(configs)(
    'When skaffold deploys with %s, then there is exactly one release, of the chart with the built image and that environment’s values file and namespace',
    (_name, effectiveConfig, environment) => {
      expect(effectiveConfig.deploy.helm.releases).toHaveLength(1);
      const [release] = effectiveConfig.deploy.helm.releases;
      expect(release?.name).toBe('social-posts');
      expect(release?.chartPath).toBe('chart');
      expect(release?.valuesFiles).toEqual([`chart/values-${environment}.yaml`]);
      expect(release?.namespace).toBe(`social-posts-${environment}`);
      expect(existsSync(resolve(repoRoot, `chart/values-${environment}.yaml`))).toBe(true);
      expect(release?.setValueTemplates).toEqual({
        'image.repository': '{{.IMAGE_REPO_social_posts}}',
        'image.tag': '{{.IMAGE_TAG_social_posts}}',
        'image.digest': '{{.IMAGE_DIGEST_social_posts}}',
      });
      expect(effectiveConfig.portForward).toEqual([
        {
          resourceType: 'service',
          resourceName: 'social-posts',
          namespace: `social-posts-${environment}`,
          port: 80,
          localPort: 8000,
        },
      ]);
    },
  );

  it.each(['staging', 'prod'])(
    'When the %s profile builds, then the API image is the production stage with nothing synced, and no test image is built',
    (environment) => {
      const built = effective(environment).build.artifacts;
      expect(built).toEqual([config.build.artifacts[0]]);
      expect(built[0]?.docker?.target).toBeUndefined();
      expect(built[0]?.sync).toBeUndefined();
    },
  );

  it('When `skaffold dev` or `skaffold debug` runs, then the dev profile activates by itself, and `run` keeps the production stage', () => {
    expect(profile('dev').activation).toEqual([{ command: 'dev' }, { command: 'debug' }]);
    for (const entry of config.profiles.filter((other) => other.name !== 'dev'))
      expect((entry.activation ?? []).filter((activation) => activation.command !== undefined)).toEqual([]);
  });

  it('When the context is a kind cluster, then the kind profile activates and the image is loaded, not pushed', () => {
    const kind = profile('kind');
    expect(kind.activation).toEqual([{ kubeContext: 'kind-.*' }]);
    expect(kind.patches).toEqual([{ op: 'add', path: '/build/local', value: { push: false } }]);
  });
});

describe('skaffold dev: the dev stage and file sync', () => {
  const dev = effective('dev');
  const artifact = dev.build.artifacts[0];
  const stage = stages.get('dev') ?? [];
  const workdir = /^WORKDIR (\S+)$/.exec(stage.find((line) => line.startsWith('WORKDIR ')) ?? '')?.[1] ?? '';

  it('When the dev profile builds, then the API image is the Dockerfile’s dev stage, which is not the default stage', () => {
    expect(artifact?.docker).toEqual({ dockerfile: 'Dockerfile', target: 'dev' });
    expect(stages.has('dev')).toBe(true);
    expect(lastStage).not.toBe('dev');
  });

  it('When the dev stage runs, then node watches service/src and migrations and runs the TypeScript sources as the non-root user', () => {
    expect(workdir).toBe('/app');
    expect(stage).toContain('COPY --chown=1000:1000 service/src ./service/src');
    expect(stage).toContain('COPY --chown=1000:1000 migrations ./migrations');
    expect(stage).toContain('USER 1000:1000');
    // skaffold debug recognises `node` as the command and puts --inspect after it.
    expect(stage.at(-1)).toBe(
      'CMD ["node", "--watch-path=service/src", "--watch-path=migrations", "--import", "tsx", "service/src/main.ts"]',
    );
    expect(stage).toContainEqual(expect.stringMatching(/^EXPOSE .*\b9229\b/));
    // skaffold's `tar xmf` then rewrites a synced file in place, so node's watcher sees every edit.
    expect(stage).toContainEqual(expect.stringMatching(/^ENV .*\bTAR_OPTIONS=--overwrite\b/));
  });

  it.each([
    ['service/src/health.ts', '/app/service/src/health.ts'],
    ['service/src/posts/posts.routes.ts', '/app/service/src/posts/posts.routes.ts'],
    ['migrations/index.ts', '/app/migrations/index.ts'],
    ['migrations/20991231000000_new.ts', '/app/migrations/20991231000000_new.ts'],
  ])('When %s changes, then skaffold syncs it to %s in the running container', (file, destination) => {
    expect(syncDestination(artifact?.sync?.manual ?? [], file, workdir)).toBe(destination);
  });

  it.each(['package.json', 'package-lock.json', 'Dockerfile', 'tsconfig.json'])(
    'When %s changes, then no sync rule matches it and skaffold rebuilds the image',
    (file) => {
      expect(syncDestination(artifact?.sync?.manual ?? [], file, workdir)).toBeUndefined();
    },
  );

  it('When the dev profile deploys, then the chart renders a writable /app for the sync and no shutdown delay for the watch restarts', async () => {
    const setValues = dev.deploy.helm.releases[0]?.setValues ?? {};
    expect(setValues).toEqual({
      'securityContext.readOnlyRootFilesystem': 'false',
      'config.shutdownDelaySeconds': '0',
    });
    const objects = await render({
      values: ['values-dev.yaml'],
      set: setValues,
      namespace: 'social-posts-dev',
    });
    expect(apiContainer(objects).securityContext?.readOnlyRootFilesystem).toBe(false);
    expect(apiContainer(objects).securityContext?.runAsNonRoot).toBe(true);
    expect(configMapData(objects).SHUTDOWN_DELAY_SECONDS).toBe('0');
  });
});

describe('skaffold verify: the end-to-end suite against the release', () => {
  const cases = config.verify ?? [];
  const env = Object.fromEntries((cases[0]?.container.env ?? []).map((entry) => [entry.name, entry.value]));
  const devValues = parse(readFileSync(resolve(repoRoot, 'chart/values-dev.yaml'), 'utf8')) as {
    ingress: { host: string };
    config: { corsAllowedOrigins: string[] };
  };

  it('When skaffold verifies the dev release, then one test case runs the suite’s image, built from the Dockerfile’s e2e stage, as a Job in the cluster', () => {
    expect(cases).toHaveLength(1);
    expect(cases[0]?.executionMode).toEqual({ kubernetesCluster: {} });
    const image = cases[0]?.container.image;
    expect(config.build.artifacts).toContainEqual({
      image,
      context: '.',
      docker: { dockerfile: 'Dockerfile', target: 'e2e' },
    });
    const e2e = stages.get('e2e') ?? [];
    expect(e2e).toContain('COPY k8s-tests/suite ./k8s-tests/suite');
    expect(e2e.at(-1)).toBe(
      'CMD ["node_modules/.bin/jest", "--selectProjects", "k8s", "--runInBand", "--verbose", "k8s-tests/suite/"]',
    );
  });

  it('When the suite runs from the Job, then it goes through ingress-nginx to the dev values’ host and origins, with no hold on the platform', () => {
    expect(env).toEqual({
      K8S_BASE_URL: 'http://ingress-nginx-controller.ingress-nginx.svc.cluster.local',
      K8S_HOST: devValues.ingress.host,
      K8S_ALLOWED_ORIGINS: devValues.config.corsAllowedOrigins.join(','),
      K8S_DRIVER: 'none',
    });
  });

  it.each(['staging', 'prod'])(
    'When the %s profile runs, then nothing is verified (the suite writes users and posts)',
    (environment) => {
      expect(effective(environment).verify).toBeUndefined();
    },
  );
});
