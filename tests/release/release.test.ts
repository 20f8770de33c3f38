/**
 * `npm run release` against a real registry (Debian's docker-registry on a local port), cut off
 * once its image is pushed and run again, which completes it: the chart pulled as an operator does
 * (`helm pull oci://… --verify`), the image by its recorded digest, the SBOMs read back from the
 * registry; then a chart and an image altered after release, refused.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';
import { engine, IMAGE, imageExists, runLimits } from '../../tools/container';
import { chartFile, publish, pullChart as pullPublished, type Published } from '../../tools/published';
import type { Registry } from '../../tools/harness/registry';
import { attachedSboms, releaseRefusals, SBOM_MEDIA_TYPE, type ReleaseRecord } from '../../tools/release';
import { ensureTools } from '../../tools/tools';

const helm = ensureTools().helm;
let published: Published;
let registry: Registry;
let work = '';
let record: ReleaseRecord;
let interrupted = '';

const run = (command: string, args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(command, args, { encoding: 'utf8', env: { ...process.env, ...env } });

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'social-posts-release-test-'));
  // CI builds the image in its own step first; without it the release builds it.
  published = await publish(work, imageExists(IMAGE) ? IMAGE : undefined, '[release] image ');
  ({ registry, record } = published);
  interrupted = published.interrupted ?? '';
});

afterAll(async () => {
  if (work) await registry.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

const pullChart = (into: string) => pullPublished(published, into);

/** An operator's pull of the released image by its recorded digest, into an OCI layout under `tag`. */
const pullImage = (tag: string) =>
  run('skopeo', [
    'copy',
    '--src-tls-verify=false',
    `docker://${record.image}@${record.imageDigest}`,
    `oci:${path.join(work, 'pulled-image')}:${tag}`,
  ]);

describe('A release in the registry', () => {
  it('When a release was killed once its image was pushed and is run again, then it completes that version with the image it pushed, and a further release is refused', async () => {
    expect(interrupted).toBe(`[release] image ${record.image}@${record.imageDigest}`);
    const refusals = await releaseRefusals({
      registry: record.image.replace(/\/social-posts$/, ''),
      plainHttp: true,
      throwaway: true,
    });
    expect(refusals).toEqual([
      `${record.image}:${record.version} is in the registry already: a published version is never replaced`,
      `${record.chart.replace(/^oci:\/\//, '')}:${record.chartVersion} is in the registry already: a published version is never replaced`,
    ]);
    // What a further completing run would find listed for the image, and keep: the two it recorded.
    const byFile = (sboms: { file: string }[]) => [...sboms].sort((a, b) => a.file.localeCompare(b.file));
    expect(byFile(attachedSboms(record.image, record.imageDigest, true))).toEqual(byFile(record.sboms));
  });

  it('When the chart is pulled with --verify, then its signature holds and its default image is the pushed one by digest', () => {
    const pulled = pullChart(path.join(work, 'pulled'));
    expect(pulled.stderr + pulled.stdout).toContain(record.chartDigest);
    expect(pulled.status).toBe(0);
    const values = run(helm, ['show', 'values', chartFile(published, path.join(work, 'pulled'))]);
    expect(values.status).toBe(0);
    const image = (parse(values.stdout) as { image: { repository: string; digest: string } }).image;
    expect(image.repository).toBe(record.image);
    expect(image.digest).toBe(record.imageDigest);
  });

  it('When the image is read and pulled by its recorded digest, then the registry serves exactly that manifest', () => {
    const raw = run('skopeo', [
      'inspect',
      '--raw',
      '--tls-verify=false',
      `docker://${record.image}@${record.imageDigest}`,
    ]);
    expect(raw.status).toBe(0);
    expect(`sha256:${createHash('sha256').update(raw.stdout).digest('hex')}`).toBe(record.imageDigest);
    const pulled = pullImage('released');
    expect(pulled.status === 0 ? '' : pulled.stderr).toBe('');
    expect(pulled.status).toBe(0);
  });

  it('When the SBOMs attached to the image are read from the registry, then the production tree lists every production package at its locked version', async () => {
    const sbom = await attachedSbom('sbom-npm-production.cdx.json');
    const production = lockedProduction();
    expect(production.length).toBeGreaterThan(50);
    expect(production.filter((pkg) => !sbom.listed.has(pkg))).toEqual([]);
  });

  it("When the image's SBOM is read from the registry, then it lists every Debian package installed in the image and every production package, at their versions", async () => {
    const sbom = await attachedSbom('sbom-image.cdx.json');
    expect(sbom.component).toEqual({ name: 'social-posts', version: record.version });
    const debian = inImage('dpkg-query', ['-W', '-f', '${Package}@${Version}\n']);
    expect(debian.length).toBeGreaterThan(50);
    expect(debian.filter((pkg) => !sbom.listed.has(pkg))).toEqual([]);
    // Every package.json at a package's root under the service's node_modules.
    const npm = inImage('node', [
      '-e',
      `const fs = require('fs');
       for (const file of fs.readdirSync('/app/node_modules', { recursive: true }))
         if (/^(.*\\/node_modules\\/)?(@[^/]+\\/)?[^/@][^/]*\\/package\\.json$/.test(file)) {
           const { name, version } = JSON.parse(fs.readFileSync('/app/node_modules/' + file, 'utf8'));
           if (name && version) console.log(name + '@' + version);
         }`,
    ]);
    const locked = new Set(lockedProduction());
    expect(npm.length).toBeGreaterThan(50);
    expect(npm.filter((pkg) => !locked.has(pkg))).toEqual([]);
    expect(npm.filter((pkg) => !sbom.listed.has(pkg))).toEqual([]);
  });
});

/** What a command run in the released image prints, line by line. */
function inImage(command: string, args: string[]): string[] {
  const [engineCommand = 'podman', ...engineArgs] = engine().command;
  const answer = run(engineCommand, [
    ...engineArgs,
    'run',
    '--rm',
    '--network',
    'host',
    ...runLimits(),
    '--entrypoint',
    command,
    IMAGE,
    ...args,
  ]);
  expect(answer.stderr).toBe('');
  expect(answer.status).toBe(0);
  return answer.stdout.trim().split('\n');
}

/** Every production package of the lock file, as `name@version`. */
function lockedProduction(): string[] {
  const lock = JSON.parse(readFileSync(path.join(__dirname, '../../package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string; dev?: boolean; name?: string }>;
  };
  return Object.entries(lock.packages)
    .filter(([key, entry]) => key !== '' && entry.dev !== true)
    .map(
      ([key, entry]) =>
        `${entry.name ?? key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length)}@${entry.version}`,
    );
}

/**
 * The SBOM attached to the released image under a file name, found as a client without the
 * referrers API finds it (the referrers tag schema's index), with what it lists as `name@version`.
 */
async function attachedSbom(
  title: string,
): Promise<{ listed: Set<string>; component: { name?: string; version?: string } }> {
  const base = `http://${registry.host}/v2/social-posts/social-posts`;
  /** A document of the repository, asked for as the media type `accept` when given. */
  const read = async <T>(at: string, accept?: string) =>
    (await (await fetch(`${base}/${at}`, accept ? { headers: { accept } } : {})).json()) as T;
  const index = await read<{ manifests: { digest: string; artifactType: string }[] }>(
    `manifests/${record.imageDigest.replace(':', '-')}`,
    'application/vnd.oci.image.index.v1+json',
  );
  type Manifest = {
    subject: { digest: string };
    layers: { digest: string; annotations?: Record<string, string> }[];
  };
  const manifests = await Promise.all(
    index.manifests
      .filter((m) => m.artifactType === SBOM_MEDIA_TYPE)
      .map((m) => read<Manifest>(`manifests/${m.digest}`, 'application/vnd.oci.image.manifest.v1+json')),
  );
  const manifest = manifests.find(
    (m) => m.layers[0]?.annotations?.['org.opencontainers.image.title'] === title,
  );
  expect(manifest?.subject.digest).toBe(record.imageDigest);
  const sbom = await read<{
    bomFormat: string;
    metadata: { component?: { name?: string; version?: string } };
    components: { name: string; version: string; group?: string; purl?: string }[];
  }>(`blobs/${manifest?.layers[0]?.digest ?? ''}`);
  expect(sbom.bomFormat).toBe('CycloneDX');
  // An npm package's group is its scope; a Debian package's is the distribution (`debian`).
  const named = (c: { name: string; group?: string; purl?: string }) =>
    c.purl?.startsWith('pkg:npm/') && c.group ? `${c.group}/${c.name}` : c.name;
  return {
    listed: new Set(sbom.components.map((c) => `${named(c)}@${c.version}`)),
    component: { name: sbom.metadata.component?.name, version: sbom.metadata.component?.version },
  };
}

describe('Altered after release', () => {
  it('When a chart with other values is pushed under the same version with the old provenance, then helm pull --verify refuses it', () => {
    const folder = path.join(work, 'tamper');
    mkdirSync(folder, { recursive: true });
    execFileSync('tar', ['-xzf', record.chartPackage, '-C', folder]);
    const values = path.join(folder, 'social-posts', 'values.yaml');
    writeFileSync(
      values,
      readFileSync(values, 'utf8').replace(record.imageDigest, `sha256:${'0'.repeat(64)}`),
    );
    const tampered = path.join(work, 'tampered');
    mkdirSync(tampered);
    const tgz = path.join(tampered, path.basename(record.chartPackage));
    execFileSync('tar', ['-czf', tgz, '-C', folder, 'social-posts']);
    copyFileSync(record.provenance, `${tgz}.prov`);
    const push = run(helm, [
      'push',
      tgz,
      `oci://${record.chart.replace(/^oci:\/\//, '').replace(/\/social-posts$/, '')}`,
      '--plain-http',
    ]);
    expect(push.status).toBe(0);
    const pulled = pullChart(path.join(work, 'pulled-tampered'));
    expect(pulled.status).not.toBe(0);
    expect(pulled.stderr).toMatch(/sha256 sum does not match|verif/i);
  });

  it('When the image manifest is altered in the registry, then reading it by the recorded digest is refused', () => {
    const hex = record.imageDigest.slice('sha256:'.length);
    const blobs = path.join(
      registry.storage,
      'docker/registry/v2/blobs/sha256',
      hex.slice(0, 2),
      hex,
      'data',
    );
    expect(readdirSync(path.dirname(blobs))).toContain('data');
    const manifest = readFileSync(blobs, 'utf8');
    writeFileSync(
      blobs,
      manifest
        .replace('"schemaVersion": 2', '"schemaVersion":2 ')
        .replace('"schemaVersion":2,', '"schemaVersion": 2 ,'),
    );
    expect(readFileSync(blobs, 'utf8')).not.toBe(manifest);
    // An operator's pull by digest (containers/image, as podman and skopeo copy use it) checks the
    // manifest it is served against the digest asked for; `skopeo inspect --raw` does not.
    const pulled = pullImage('altered');
    expect(pulled.status).not.toBe(0);
    expect(pulled.stderr).toMatch(/does not match .*digest/i);
  });
});
