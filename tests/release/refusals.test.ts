/**
 * What `npm run release` refuses before it builds or pushes anything, against a real registry on a
 * local port, its requests to a registry whose front end closes idle connections, and the release
 * workflow's chart step run as the workflow runs it.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';
import { sleep } from '../../tools/harness/client';
import { startRegistry, type Registry } from '../../tools/harness/registry';
import { freePort } from '../../tools/harness/service';
import { treeVersions } from '../../tools/harness/releases';
import { throwawayKey } from '../../tools/published';
import { pushRefusal } from '../../tools/registry-login';
import { release, releaseRefusals } from '../../tools/release';

const root = path.join(__dirname, '..', '..');
let registry: Registry;
let work = '';
let key: { name: string; secring: string; pubring: string };

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'social-posts-refusals-'));
  key = throwawayKey(work);
  registry = await startRegistry();
});

afterAll(async () => {
  await registry.stop();
  rmSync(work, { recursive: true, force: true });
});

/** The tags a repository of the registry holds (none when it has never been pushed to). */
async function tags(repository: string): Promise<string[]> {
  const answer = await fetch(`http://${registry.host}/v2/${repository}/tags/list`);
  if (answer.status === 404) return [];
  return ((await answer.json()) as { tags: string[] | null }).tags ?? [];
}

/** Puts a small manifest under `repository:tag`, as an earlier release of that version would have. */
async function pushTag(repository: string, tag: string): Promise<void> {
  const base = `http://${registry.host}/v2/${repository}`;
  const config = Buffer.from('{}');
  const digest = `sha256:${createHash('sha256').update(config).digest('hex')}`;
  const start = await fetch(`${base}/blobs/uploads/`, { method: 'POST' });
  const upload = new URL(start.headers.get('location') ?? '', `http://${registry.host}`);
  upload.searchParams.set('digest', digest);
  expect((await fetch(upload, { method: 'PUT', body: new Uint8Array(config) })).status).toBe(201);
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.empty.v1+json', digest, size: config.length },
    layers: [],
  });
  const put = await fetch(`${base}/manifests/${tag}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
    body: manifest,
  });
  expect(put.status).toBe(201);
}

/** A release of an image that was never built: refused before the push, or failing at it. */
const releaseInto = (registryPath: string, keyName: string) =>
  release({
    registry: `${registry.host}/${registryPath}`,
    key: keyName,
    keyring: key.secring,
    image: 'social-posts:never-built',
    plainHttp: true,
    out: path.join(work, registryPath),
    throwaway: true,
  });

describe('What a release refuses before pushing anything', () => {
  it('When the key is not one helm can sign with, then the release is refused naming it, and nothing reaches the registry', async () => {
    await expect(releaseInto('wrong-key', 'Nobody')).rejects.toThrow(/cannot sign with the key "Nobody"/);
    expect(await tags('wrong-key/social-posts')).toEqual([]);
    expect(await tags('wrong-key/charts/social-posts')).toEqual([]);
  });

  it("When this version's image is in the registry already and is not the image this release would push, then the release is refused and the tag keeps what it held", async () => {
    const { app } = treeVersions();
    await pushTag('image-there/social-posts', app);
    await expect(releaseInto('image-there', key.name)).rejects.toThrow(
      `${registry.host}/image-there/social-posts:${app} is in the registry already and is not this release's image`,
    );
    expect(await tags('image-there/social-posts')).toEqual([app]);
    expect(
      await releaseRefusals({ registry: `${registry.host}/image-there`, plainHttp: true, throwaway: true }),
    ).toEqual([expect.stringContaining(`social-posts:${app} is in the registry already, without its chart`)]);
  });

  it("When this version's chart is in the registry already, then the release is refused and no image is pushed", async () => {
    const { chart } = treeVersions();
    await pushTag('chart-there/charts/social-posts', chart);
    await expect(releaseInto('chart-there', key.name)).rejects.toThrow(
      `${registry.host}/chart-there/charts/social-posts:${chart} is in the registry already`,
    );
    expect(await tags('chart-there/social-posts')).toEqual([]);
  });

  it('When the changelog lists changes under Unreleased, the tree has changes that are not committed, or the service changed since the commit its version was recorded as cut from, then the release is refused naming each; once named in a release and committed, it is not', async () => {
    const clone = path.join(work, 'clone');
    execFileSync('git', ['clone', '-q', '--shared', root, clone]);
    const changelog = path.join(clone, 'CHANGELOG.md');
    const commit = (text: string) => {
      writeFileSync(changelog, text);
      execFileSync('git', [
        '-C',
        clone,
        '-c',
        'user.name=R',
        '-c',
        'user.email=r@example.com',
        'commit',
        '-qam',
        'c',
      ]);
    };
    const withUnreleased = (entries: string) =>
      readFileSync(changelog, 'utf8').replace(
        /## \[Unreleased\]\n[\s\S]*?\n## \[/,
        `## [Unreleased]\n\n${entries}## [`,
      );
    const options = { registry: `${registry.host}/clone`, plainHttp: true };
    commit(withUnreleased(''));
    expect(await releaseRefusals(options, clone)).toEqual([]);

    commit(withUnreleased('### Fixed\n\n- A fix no release names.\n\n'));
    expect(await releaseRefusals(options, clone)).toEqual([
      expect.stringMatching(/lists changes under \[Unreleased\] \("A fix no release names\."\)/),
    ]);

    commit(withUnreleased(''));
    const file = path.join(clone, 'service', 'src', 'app.ts');
    writeFileSync(file, `${readFileSync(file, 'utf8')}\n// an edit\n`);
    expect(await releaseRefusals(options, clone)).toEqual([
      expect.stringMatching(/changes that are not committed \(.*service\/src\/app\.ts/),
    ]);

    // This version recorded as cut from the commit before the edit, then the edit committed: the
    // edit would go out under that version.
    const { app } = treeVersions(clone);
    const cut = execFileSync('git', ['-C', clone, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
    commit(readFileSync(changelog, 'utf8').replace(/(\nChart [^ ]+ · commit )pending\n/, `$1${cut}\n`));
    expect(await releaseRefusals(options, clone)).toEqual([
      expect.stringMatching(
        new RegExp(
          `^the service changed since ${app} .*package\\.json is still ${app}.*service/src/app\\.ts`,
        ),
      ),
    ]);
  });
});

describe('A registry behind a front end that closes idle connections', () => {
  it('When the release has been busy longer than the front end keeps a connection open, then its next request to the registry is answered', async () => {
    const port = await freePort();
    const front = spawn('socat', [
      '-T',
      '1',
      `TCP-LISTEN:${port},bind=127.0.0.1,fork,reuseaddr`,
      `TCP:${registry.host}`,
    ]);
    try {
      const listening = () =>
        new Promise<boolean>((resolve) => {
          const socket = connect(port, '127.0.0.1', () => {
            socket.destroy();
            resolve(true);
          });
          socket.on('error', () => {
            resolve(false);
          });
        });
      while (!(await listening())) await sleep(100);
      const host = `127.0.0.1:${String(port)}`;
      expect(await pushRefusal(host, 'idle/social-posts', true, 'containers')).toBeUndefined();
      // A build, a push or an SBOM blocks the release's event loop like this, for minutes.
      execFileSync('sleep', ['2']);
      expect(await pushRefusal(host, 'idle/social-posts', true, 'containers')).toBeUndefined();
    } finally {
      front.kill();
    }
  });
});

describe("The release workflow's chart step", () => {
  it('When its command makes the chart to package, then the copy names the image by the digest given', () => {
    const workflow = parse(readFileSync(path.join(root, '.github', 'workflows', 'release.yml'), 'utf8')) as {
      jobs: { release: { steps: { id?: string; run?: string }[] } };
    };
    const script = workflow.jobs.release.steps.find((step) => step.id === 'chart')?.run ?? '';
    const line = script.split('\n').find((l) => l.startsWith('chart_dir='));
    expect(line).toBeDefined();
    const digest = `sha256:${'a'.repeat(64)}`;
    const made = spawnSync('bash', ['-ec', `${line ?? ''}\nprintf '%s' "$chart_dir"`], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, IMAGE: 'ghcr.io/owner/social-posts', DIGEST: digest },
    });
    expect(made.stderr).not.toMatch(/Error/);
    expect(made.status).toBe(0);
    const values = parse(readFileSync(path.join(made.stdout, 'values.yaml'), 'utf8')) as {
      image: { repository: string; digest: string };
    };
    expect(values.image).toMatchObject({ repository: 'ghcr.io/owner/social-posts', digest });
    expect(existsSync(path.join(made.stdout, 'Chart.yaml'))).toBe(true);
    rmSync(path.dirname(made.stdout), { recursive: true, force: true });
  });
});
