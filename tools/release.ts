/**
 * `npm run release -- --registry HOST[:PORT]/PATH --key NAME --keyring SECRING [--image REF]
 * [--plain-http] [--out DIR] [--record CHANGELOG]`: cuts the release this tree carries. The image
 * (built, or `--image`) is pushed as `<registry>/social-posts:<version>`; its SBOMs (the image's
 * contents by cdxgen, the production npm tree by cyclonedx-npm) are attached to it as OCI artifacts,
 * also listed in the referrers tag schema's index for registries without the referrers API; the
 * chart, its default image set to that digest, is signed and pushed to `oci://<registry>/charts`.
 * `release.json` in the output folder records versions, commit and digests; `--record` writes the
 * digests under the version's record line of the changelog. Image and SBOMs go with the login
 * podman and skopeo read, the chart with helm's. Before anything is built or pushed it refuses
 * (releaseRefusals) a tree whose versions are out of step, whose service or chart changed since the
 * newest recorded release without a new version, or whose changes are not committed, a
 * key helm cannot sign with, a version whose image or chart is published already, and a repository
 * that would not take the push with its tool's login; `--check --registry …` runs those checks alone.
 * A version whose image went out without its chart (an interrupted release) it completes, if that
 * image is the very one it would push; `--check` names it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseDocument } from 'yaml';
import { build, commandLine, engine, IMAGE } from './container';
import {
  changelogProblems,
  changeProblems,
  parseChangelog,
  treeVersions,
  versionProblems,
} from './harness/releases';
import { repoRoot } from './node-release';
import { IMAGE_SBOM_FILE, imageSbom } from './image-sbom';
import { pushRefusal, registryFetch, registrySession } from './registry-login';
import { ensureBase } from './stand-in-base';
import { ensureTools } from './tools';

export const SBOM_MEDIA_TYPE = 'application/vnd.cyclonedx+json';
const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
const EMPTY_CONFIG = { mediaType: 'application/vnd.oci.empty.v1+json', content: '{}' };

export interface ReleaseRecord {
  version: string;
  chartVersion: string;
  commit: string;
  image: string;
  imageDigest: string;
  chart: string;
  chartDigest: string;
  sboms: { file: string; manifestDigest: string }[];
  chartPackage: string;
  provenance: string;
}

function log(message: string): void {
  process.stdout.write(`[release] ${message}\n`);
}

function exec(command: string, args: string[], options: { cwd?: string } = {}): string {
  return execFileSync(command, args, {
    cwd: options.cwd ?? repoRoot,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 256 * 1024 * 1024,
  });
}

const sha256 = (data: Buffer | string): string => `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** The manifest's digest as the registry stores it: skopeo reads it, its bytes are hashed here. */
function manifestDigest(reference: string, plainHttp: boolean): { digest: string; raw: string } {
  const raw = exec('skopeo', [
    'inspect',
    '--raw',
    ...(plainHttp ? ['--tls-verify=false'] : []),
    `docker://${reference}`,
  ]);
  return { digest: sha256(raw), raw };
}

/**
 * Attaches files to a manifest as OCI 1.1 artifacts (`subject` set to it), and lists them in the
 * referrers tag schema's index so that clients find them on registries without the referrers API.
 * skopeo pushes each artifact, by digest and unchanged, from an OCI layout written here, with the
 * login it pushed the image with; the index goes through the registry's API with that same login,
 * as skopeo would drop its descriptors' `artifactType`.
 */
async function attachArtifacts(
  repository: { host: string; path: string },
  subject: { digest: string; raw: string; mediaType: string },
  files: { file: string; artifactType: string }[],
  plainHttp: boolean,
): Promise<{ file: string; manifestDigest: string }[]> {
  const layout = mkdtempSync(path.join(tmpdir(), 'social-posts-artifacts-'));
  try {
    const blobs = path.join(layout, 'blobs', 'sha256');
    mkdirSync(blobs, { recursive: true });
    const store = (data: Buffer | string): { digest: string; size: number } => {
      const digest = sha256(data);
      writeFileSync(path.join(blobs, digest.slice('sha256:'.length)), data);
      return { digest, size: Buffer.byteLength(data) };
    };
    const config = store(EMPTY_CONFIG.content);
    const attached = files.map(({ file, artifactType }) => {
      const layer = store(readFileSync(file));
      const manifest = JSON.stringify({
        schemaVersion: 2,
        mediaType: OCI_MANIFEST,
        artifactType,
        config: { mediaType: EMPTY_CONFIG.mediaType, ...config },
        layers: [
          {
            mediaType: artifactType,
            ...layer,
            annotations: { 'org.opencontainers.image.title': path.basename(file) },
          },
        ],
        subject: {
          mediaType: subject.mediaType,
          digest: subject.digest,
          size: Buffer.byteLength(subject.raw),
        },
        annotations: { 'org.opencontainers.image.created': new Date().toISOString() },
      });
      return { file: path.basename(file), artifactType, ...store(manifest) };
    });
    writeFileSync(path.join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    writeFileSync(
      path.join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: OCI_INDEX,
        manifests: attached.map(({ file, digest, size }) => ({
          mediaType: OCI_MANIFEST,
          digest,
          size,
          annotations: { 'org.opencontainers.image.ref.name': file },
        })),
      }),
    );
    const target = `${repository.host}/${repository.path}`;
    for (const { file, digest } of attached)
      exec('skopeo', [
        'copy',
        '--preserve-digests',
        ...(plainHttp ? ['--dest-tls-verify=false'] : []),
        `oci:${layout}:${file}`,
        `docker://${target}@${digest}`,
      ]);
    const tag = subject.digest.replace(':', '-');
    const ours = new Set(attached.map(({ artifactType }) => artifactType));
    // What others listed under the tag since (a signature, say) stays; ours replace their kind.
    const others = referrersOf(`${target}:${tag}`, plainHttp).filter(
      (entry) => !ours.has(entry.artifactType ?? ''),
    );
    const index = JSON.stringify({
      schemaVersion: 2,
      mediaType: OCI_INDEX,
      manifests: [
        ...others,
        ...attached.map(({ digest, size, artifactType }) => ({
          mediaType: OCI_MANIFEST,
          digest,
          size,
          artifactType,
        })),
      ],
    });
    const session = await registrySession(repository.host, repository.path, plainHttp, 'containers');
    const put = await registryFetch(`${session.base}/v2/${repository.path}/manifests/${tag}`, {
      method: 'PUT',
      headers: { ...session.headers, 'content-type': OCI_INDEX },
      body: index,
    });
    if (put.status !== 201)
      throw new Error(`the referrers index ${target}:${tag}: ${String(put.status)} ${await put.text()}`);
    return attached.map(({ file, digest }) => ({ file, manifestDigest: digest }));
  } finally {
    rmSync(layout, { recursive: true, force: true });
  }
}

/** The npm SBOM's file name, also its title in the registry. */
const NPM_SBOM_FILE = 'sbom-npm-production.cdx.json';

/**
 * The production npm tree in CycloneDX, from the lock file, by CycloneDX's own npm generator:
 * `npm sbom --omit dev` leaves some of the lock's production packages out.
 * Flattened, so that a package nested under another's node_modules is a component of its own.
 */
function npmSbom(out: string): string {
  const file = path.join(out, NPM_SBOM_FILE);
  exec(path.join(repoRoot, 'node_modules', '.bin', 'cyclonedx-npm'), [
    '--omit',
    'dev',
    '--package-lock-only',
    '--flatten-components',
    '--output-reproducible',
    '--output-format',
    'JSON',
    '--output-file',
    file,
  ]);
  return file;
}

/** A copy of the chart whose default image is the one pushed, by digest (the release workflow's too). */
export function chartWithImage(repository: string, digest: string): string {
  const folder = mkdtempSync(path.join(tmpdir(), 'social-posts-chart-'));
  const chart = path.join(folder, 'social-posts');
  cpSync(path.join(repoRoot, 'chart'), chart, { recursive: true });
  const valuesFile = path.join(chart, 'values.yaml');
  const values = parseDocument(readFileSync(valuesFile, 'utf8'));
  // New nodes, so that the values are written plain rather than in the empty strings' quotes.
  values.setIn(['image', 'repository'], values.createNode(repository));
  values.setIn(['image', 'digest'], values.createNode(digest));
  writeFileSync(valuesFile, values.toString());
  return chart;
}

export interface ReleaseOptions {
  registry: string;
  key: string;
  keyring: string;
  image?: string;
  plainHttp: boolean;
  out: string;
  record?: string;
  /** A throwaway release into a throwaway registry (the tests'): of the tree as it is, named by nothing. */
  throwaway?: boolean;
}

/** `HOST[:PORT]/PATH` as the registry's host and the path there of one of its repositories. */
function repositoryIn(registry: string, repository: string): { host: string; path: string } {
  const [host = '', ...under] = registry.split('/');
  return { host, path: [...under, repository].join('/') };
}

/** Whether the registry holds `reference`; a failure other than "not there" throws, so nothing is assumed absent. */
function inRegistry(reference: string, plainHttp: boolean): boolean {
  try {
    manifestDigest(reference, plainHttp);
    return true;
  } catch (error) {
    const stderr = String((error as { stderr?: unknown }).stderr ?? error);
    if (/manifest unknown|name unknown|repository name not known/i.test(stderr)) return false;
    throw new Error(`cannot tell whether ${reference} is in the registry: ${stderr.trim()}`, {
      cause: error,
    });
  }
}

/** Whether helm signs with the key: a package of the chart signed into a scratch folder. */
function signingProblem(key: string, keyring: string, root: string): string | undefined {
  const folder = mkdtempSync(path.join(tmpdir(), 'social-posts-signing-'));
  try {
    const signed = spawnSync(
      ensureTools().helm,
      [
        'package',
        '--sign',
        '--key',
        key,
        '--keyring',
        keyring,
        '--destination',
        folder,
        path.join(root, 'chart'),
      ],
      { encoding: 'utf8' },
    );
    if (signed.status === 0) return undefined;
    return `helm cannot sign with the key "${key}" of ${keyring}: ${signed.stderr.trim()}`;
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

/**
 * Why this tree may not be released into the registry, checked before anything is built or pushed:
 * versions out of step, changes listed under Unreleased or not committed (the image would hold
 * what its version does not name), a key helm cannot sign with (checked when given), this
 * version's image or chart already published (but for the image alone when `completing`), or a
 * repository that would not take the push with the login its tool reads (else the image went out
 * and its SBOMs or chart did not).
 */
export async function releaseRefusals(
  options: Pick<ReleaseOptions, 'registry' | 'plainHttp' | 'throwaway'> & {
    key?: string;
    keyring?: string;
    /** The release's own check: this version's image without its chart is for it to complete. */
    completing?: boolean;
  },
  root: string = repoRoot,
): Promise<string[]> {
  const problems = versionProblems(root).filter((problem) => !problem.includes('is not in this clone'));
  if (!options.throwaway) {
    // The tree as CI's release checks hold it: no service or chart change since the newest recorded
    // release without a version past it, which would go out under that release's version.
    problems.push(...changelogProblems(root), ...changeProblems(root));
    const { unreleased } = parseChangelog(readFileSync(path.join(root, 'CHANGELOG.md'), 'utf8'));
    const [first, ...more] = unreleased;
    if (first !== undefined)
      problems.push(
        `CHANGELOG.md lists changes under [Unreleased] ("${first.slice(2)}"${more.length > 0 ? ` and ${String(more.length)} more` : ''}), which this release would ship without naming them: move them into the section of the version to release`,
      );
    const changed = exec('git', ['-C', root, 'status', '--porcelain'])
      .split('\n')
      .map((line) => line.trim())
      .filter(Boolean);
    if (changed.length > 0)
      problems.push(
        `the tree has changes that are not committed (${changed.slice(0, 5).join(', ')}): commit them or set them aside, the release records the commit it was cut from`,
      );
  }
  if (options.key !== undefined && options.keyring !== undefined) {
    const signing = signingProblem(options.key, options.keyring, root);
    if (signing) problems.push(signing);
  }
  const versions = treeVersions(root);
  const imageRef = `${options.registry}/social-posts:${versions.app}`;
  const chartRef = `${options.registry}/charts/social-posts:${versions.chart}`;
  try {
    const chartThere = inRegistry(chartRef, options.plainHttp);
    // The image without its chart is an interrupted release: release() completes it if it is the same image.
    if (inRegistry(imageRef, options.plainHttp) && (chartThere || !options.completing))
      problems.push(
        chartThere
          ? `${imageRef} is in the registry already: a published version is never replaced`
          : `${imageRef} is in the registry already, without its chart (an interrupted release): \`npm run release\` run again with the image it pushed completes it; one the forge's workflow pushed needs a new version, as a published version is never replaced`,
      );
    if (chartThere)
      problems.push(`${chartRef} is in the registry already: a published version is never replaced`);
  } catch (error) {
    problems.push(error instanceof Error ? error.message : String(error));
  }
  for (const [repository, tool] of [
    ['social-posts', 'containers'],
    ['charts/social-posts', 'helm'],
  ] as const) {
    try {
      const { host, path: at } = repositoryIn(options.registry, repository);
      const refusal = await pushRefusal(host, at, options.plainHttp, tool);
      if (refusal) problems.push(refusal);
    } catch (error) {
      problems.push(
        `cannot tell whether ${options.registry}/${repository} takes pushes: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  }
  return problems;
}

/**
 * Refuses to complete an interrupted release unless the image under its tag is `local` itself: the
 * same config digest, so the same layers, history and labels, built from this commit again.
 */
function sameImageOrRefuse(reference: string, local: string, plainHttp: boolean): void {
  const { raw } = manifestDigest(reference, plainHttp);
  const pushed = (JSON.parse(raw) as { config?: { digest?: string } }).config?.digest ?? 'none';
  let built = 'none (not in the engine)';
  try {
    // podman prints the id bare, docker with its algorithm.
    const id = exec(...commandLine(['image', 'inspect', '--format', '{{.Id}}', local])).trim();
    built = id.startsWith('sha256:') ? id : `sha256:${id}`;
  } catch {
    // No such local image: it cannot be the one pushed.
  }
  if (pushed !== built)
    throw new Error(
      `the release is refused: ${reference} is in the registry already and is not this release's image (its config ${pushed}, this one's ${built}): a published version is never replaced`,
    );
  log(
    `${reference} is this release's image (config ${built}), pushed by an interrupted release: completing it`,
  );
}

/** The entries of a referrers tag's index (`<repository>:sha256-<hex>`), none when there is no such tag. */
function referrersOf(
  indexRef: string,
  plainHttp: boolean,
): { mediaType: string; digest: string; size: number; artifactType?: string }[] {
  if (!inRegistry(indexRef, plainHttp)) return [];
  const index = JSON.parse(manifestDigest(indexRef, plainHttp).raw) as {
    manifests?: { mediaType: string; digest: string; size: number; artifactType?: string }[];
  };
  return index.manifests ?? [];
}

/** The SBOMs the referrers tag lists for `digest` whose subject it is, by file title. */
export function attachedSboms(
  repository: string,
  digest: string,
  plainHttp: boolean,
): { file: string; manifestDigest: string }[] {
  return referrersOf(`${repository}:${digest.replace(':', '-')}`, plainHttp)
    .filter((entry) => entry.artifactType === SBOM_MEDIA_TYPE)
    .flatMap((entry) => {
      const manifest = JSON.parse(manifestDigest(`${repository}@${entry.digest}`, plainHttp).raw) as {
        subject?: { digest?: string };
        layers?: { annotations?: Record<string, string> }[];
      };
      const file = manifest.layers?.[0]?.annotations?.['org.opencontainers.image.title'];
      return manifest.subject?.digest === digest && file ? [{ file, manifestDigest: entry.digest }] : [];
    });
}

export async function release(options: ReleaseOptions): Promise<ReleaseRecord> {
  const versions = treeVersions();
  const problems = await releaseRefusals({ ...options, completing: true });
  if (problems.length > 0) throw new Error(`the release is refused: ${problems.join('; ')}`);
  const commit = exec('git', ['rev-parse', 'HEAD']).trim();
  const tls = options.plainHttp ? ['--tls-verify=false'] : [];
  mkdirSync(options.out, { recursive: true });

  let local = options.image;
  if (!local) {
    ensureBase(log);
    build(repoRoot, IMAGE, log);
    local = IMAGE;
  }
  const imageRepository = `${options.registry}/social-posts`;
  const imageRef = `${imageRepository}:${versions.app}`;
  const completing = inRegistry(imageRef, options.plainHttp);
  if (completing) sameImageOrRefuse(imageRef, local, options.plainHttp);
  else {
    log(`pushing ${local} as ${imageRef}`);
    if (engine().name === 'docker') {
      // docker pushes a tag, and has no TLS switch: its daemon's insecure-registries list allows plain HTTP.
      exec(...commandLine(['tag', local, imageRef]));
      exec(...commandLine(['push', imageRef]));
    } else exec(...commandLine(['push', ...tls, local, `docker://${imageRef}`]));
  }
  const image = manifestDigest(imageRef, options.plainHttp);
  const imageMediaType = (JSON.parse(image.raw) as { mediaType?: string }).mediaType ?? OCI_MANIFEST;
  log(`image ${imageRepository}@${image.digest}`);

  const sbomTitles = [IMAGE_SBOM_FILE, NPM_SBOM_FILE];
  const attached = completing ? attachedSboms(imageRepository, image.digest, options.plainHttp) : [];
  const sboms =
    attached.length === sbomTitles.length &&
    sbomTitles.every((title) => attached.some((sbom) => sbom.file === title))
      ? attached
      : await attachArtifacts(
          repositoryIn(options.registry, 'social-posts'),
          { ...image, mediaType: imageMediaType },
          [imageSbom(local, versions.app, options.out), npmSbom(options.out)].map((file) => ({
            file,
            artifactType: SBOM_MEDIA_TYPE,
          })),
          options.plainHttp,
        );
  log(
    `SBOMs ${sboms === attached ? 'attached already' : 'attached'} to the image: ${sboms.map((sbom) => sbom.manifestDigest).join(', ')}`,
  );

  const { helm } = ensureTools();
  const chartDir = chartWithImage(imageRepository, image.digest);
  try {
    const signing = ['--sign', '--key', options.key, '--keyring', options.keyring];
    exec(helm, ['package', ...signing, '--destination', options.out, chartDir]);
  } finally {
    rmSync(path.dirname(chartDir), { recursive: true, force: true });
  }
  const chartPackage = path.join(options.out, `social-posts-${versions.chart}.tgz`);
  const chartRepository = `${options.registry}/charts`;
  // helm push replaces a tag: another run of this version may have pushed the chart meanwhile.
  if (inRegistry(`${chartRepository}/social-posts:${versions.chart}`, options.plainHttp))
    throw new Error(
      `the release is refused: ${chartRepository}/social-posts:${versions.chart} went into the registry while this release ran (another release of this version): a published version is never replaced`,
    );
  exec(helm, [
    'push',
    chartPackage,
    `oci://${chartRepository}`,
    ...(options.plainHttp ? ['--plain-http'] : []),
  ]);
  const chart = manifestDigest(`${chartRepository}/social-posts:${versions.chart}`, options.plainHttp);
  log(`chart oci://${chartRepository}/social-posts@${chart.digest} (signed: ${chartPackage}.prov)`);

  const record: ReleaseRecord = {
    version: versions.app,
    chartVersion: versions.chart,
    commit,
    image: imageRepository,
    imageDigest: image.digest,
    chart: `oci://${chartRepository}/social-posts`,
    chartDigest: chart.digest,
    sboms,
    chartPackage,
    provenance: `${chartPackage}.prov`,
  };
  writeFileSync(path.join(options.out, 'release.json'), `${JSON.stringify(record, null, 2)}\n`);
  if (options.record) recordInChangelog(options.record, record);
  return record;
}

/** The digests line under the version's record line (replacing one written before). */
function recordInChangelog(file: string, record: ReleaseRecord): void {
  const lines = readFileSync(file, 'utf8').split('\n');
  const heading = lines.findIndex((line) => line.startsWith(`## [${record.version}] - `));
  const recordLine = lines.findIndex((line, index) => index > heading && line.startsWith('Chart '));
  if (heading < 0 || recordLine < 0) throw new Error(`${file} has no section for ${record.version}`);
  const digests = `Image \`${record.image}@${record.imageDigest}\` · chart \`${record.chart}:${record.chartVersion}@${record.chartDigest}\``;
  if (lines[recordLine + 1]?.startsWith('Image `')) lines[recordLine + 1] = digests;
  else lines.splice(recordLine + 1, 0, digests);
  writeFileSync(file, lines.join('\n'));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      registry: { type: 'string' },
      key: { type: 'string' },
      keyring: { type: 'string' },
      image: { type: 'string' },
      'plain-http': { type: 'boolean', default: false },
      out: { type: 'string', default: path.join(repoRoot, 'dist', 'release') },
      record: { type: 'string' },
      check: { type: 'boolean', default: false },
    },
  });
  if (values.check && values.registry) {
    // The refusals alone (the release workflow's first step); the key only when given.
    const problems = await releaseRefusals({
      registry: values.registry,
      plainHttp: values['plain-http'],
      ...(values.key && values.keyring ? { key: values.key, keyring: values.keyring } : {}),
    });
    if (problems.length > 0) throw new Error(`the release is refused: ${problems.join('; ')}`);
    log(`nothing refuses this release into ${values.registry}`);
    return;
  }
  if (!values.registry || !values.key || !values.keyring)
    throw new Error(
      'usage: npm run release -- --registry HOST[:PORT]/PATH --key NAME --keyring SECRING [--image REF] [--plain-http] [--out DIR] [--record CHANGELOG.md], or --check --registry HOST[:PORT]/PATH [--plain-http] [--key NAME --keyring SECRING]',
    );
  const record = await release({
    registry: values.registry,
    key: values.key,
    keyring: values.keyring,
    plainHttp: values['plain-http'],
    out: values.out,
    ...(values.image ? { image: values.image } : {}),
    ...(values.record ? { record: values.record } : {}),
  });
  log(`done: ${JSON.stringify(record)}`);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`[release] failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
