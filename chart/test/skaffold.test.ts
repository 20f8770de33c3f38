import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import Ajv from 'ajv';
import { parse } from 'yaml';
import { environments, repoRoot } from './helm';

interface HelmRelease {
  name: string;
  chartPath?: string;
  namespace?: string;
  valuesFiles?: string[];
  setValueTemplates?: Record<string, string>;
}
interface PortForward {
  resourceType: string;
  resourceName: string;
  namespace?: string;
  port: number;
  localPort?: number;
}
interface Profile {
  name: string;
  activation?: { kubeContext?: string }[];
  deploy?: { helm?: { releases?: HelmRelease[] } };
  portForward?: PortForward[];
  patches?: { op: string; path: string; value?: unknown }[];
}
interface SkaffoldConfig {
  apiVersion: string;
  build: { artifacts: { image: string; context?: string; docker?: { dockerfile?: string } }[] };
  deploy: { helm: { releases: HelmRelease[] } };
  portForward: PortForward[];
  profiles: Profile[];
}

const config = parse(readFileSync(resolve(repoRoot, 'skaffold.yaml'), 'utf8')) as SkaffoldConfig;

function profile(name: string): Profile {
  const found = config.profiles.find((entry) => entry.name === name);
  if (!found) throw new Error(`no skaffold profile ${name}`);
  return found;
}

function onlyRelease(releases: HelmRelease[] | undefined): HelmRelease {
  expect(releases).toHaveLength(1);
  return (releases ?? [])[0] as HelmRelease;
}

describe('skaffold.yaml against the published schema', () => {
  // Vendored copy of skaffold's v4beta14 schema (provenance: chart/test/schemas/README.md).
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

  it('When a misspelt key is added, then the schema refuses it (the validation is live)', () => {
    const broken = structuredClone(config) as SkaffoldConfig & { deploy: { helm: { relases?: unknown } } };
    broken.deploy.helm.relases = [];
    expect(validate(broken)).toBe(false);
  });
});

describe('skaffold build and deploy', () => {
  it('When skaffold builds, then the one artifact is the Dockerfile at the repository root', () => {
    expect(config.build.artifacts).toEqual([
      { image: 'social-posts', context: '.', docker: { dockerfile: 'Dockerfile' } },
    ]);
    expect(existsSync(resolve(repoRoot, 'Dockerfile'))).toBe(true);
  });

  const releases: [string, HelmRelease | undefined][] = [
    ['the default (dev) deploy', config.deploy.helm.releases[0]],
    ...environments.map((environment): [string, HelmRelease | undefined] => [
      `the ${environment} profile`,
      profile(environment).deploy?.helm?.releases?.[0],
    ]),
  ];

  it.each(releases)(
    'When %s deploys, then the chart gets the built image repository, tag and digest',
    (_name, release) => {
      expect(release?.chartPath).toBe('chart');
      expect(release?.setValueTemplates).toEqual({
        'image.repository': '{{.IMAGE_REPO_social_posts}}',
        'image.tag': '{{.IMAGE_TAG_social_posts}}',
        'image.digest': '{{.IMAGE_DIGEST_social_posts}}',
      });
    },
  );

  it.each(environments)(
    'When the %s profile deploys, then it uses its own values file and namespace',
    (environment) => {
      const release = onlyRelease(profile(environment).deploy?.helm?.releases);
      expect(release.valuesFiles).toEqual([`chart/values-${environment}.yaml`]);
      expect(release.namespace).toBe(`social-posts-${environment}`);
      expect(existsSync(resolve(repoRoot, `chart/values-${environment}.yaml`))).toBe(true);
    },
  );

  it('When no profile is named, then skaffold deploys the dev values', () => {
    expect(onlyRelease(config.deploy.helm.releases)).toEqual(
      onlyRelease(profile('dev').deploy?.helm?.releases),
    );
  });

  it.each(environments)(
    'When the %s profile runs, then the API Service is forwarded to local port 8000',
    (environment) => {
      expect(profile(environment).portForward).toEqual([
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

  it('When the context is a kind cluster, then the kind profile activates and the image is loaded, not pushed', () => {
    const kind = profile('kind');
    expect(kind.activation).toEqual([{ kubeContext: 'kind-.*' }]);
    expect(kind.patches).toEqual([{ op: 'add', path: '/build/local', value: { push: false } }]);
  });
});
