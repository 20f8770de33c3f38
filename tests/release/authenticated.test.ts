/**
 * `npm run release` into a registry that takes nothing without a login, as every forge's asks for
 * one: by password (htpasswd) and by a token for it (as GHCR and Harbor do). The logins are in
 * auth files as `skopeo login` and `helm registry login` write them, the release runs as its own
 * process with them, and the SBOMs are found from the image's digest with the same login, as
 * docs/operations.md tells an operator; a login that may not push, or none for helm, is refused
 * before anything is pushed.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { IMAGE, imageExists } from '../../tools/container';
import { startRegistry, type Registry } from '../../tools/harness/registry';
import type { RegistryLogin } from '../../tools/harness/registry-tokens';
import { throwawayKey } from '../../tools/published';
import { SBOM_MEDIA_TYPE, type ReleaseOptions, type ReleaseRecord } from '../../tools/release';
import { ensureTools } from '../../tools/tools';

const root = path.join(__dirname, '..', '..');
const helm = ensureTools().helm;
const releaser: RegistryLogin = { username: 'releaser', password: randomBytes(12).toString('hex') };
const reader: RegistryLogin = {
  username: 'reader',
  password: randomBytes(12).toString('hex'),
  may: ['pull'],
};
let work = '';
let key: { name: string; secring: string };

beforeAll(() => {
  work = mkdtempSync(path.join(tmpdir(), 'social-posts-authenticated-'));
  key = throwawayKey(work);
});

afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});

const sha256 = (data: string | Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** skopeo as the operator runs it, with the auth file `skopeo login` wrote. */
const skopeo = (args: string[], authFile: string) =>
  spawnSync('skopeo', [...args, '--authfile', authFile], { encoding: 'utf8' });

/** An auth file as `skopeo login` and `helm registry login` write it, holding one login or none. */
function authFile(name: string, host: string, login?: { username: string; password: string }): string {
  const file = path.join(work, `${name}.json`);
  const auths = login
    ? { [host]: { auth: Buffer.from(`${login.username}:${login.password}`).toString('base64') } }
    : {};
  writeFileSync(file, JSON.stringify({ auths }));
  return file;
}

describe.each(['basic', 'bearer'] as const)(
  'A release into a registry that asks for a login (%s)',
  (auth) => {
    let registry: Registry;
    /** The operator's logins: podman's and skopeo's auth file, and helm's registry config. */
    let logins: { REGISTRY_AUTH_FILE: string; HELM_REGISTRY_CONFIG: string };

    /** `npm run release` of the tree as it is, as a process of its own with the logins `env` names. */
    function releaseWith(env: Record<string, string>, registryPath: string, image?: string) {
      const out = path.join(work, auth, registryPath);
      const options: ReleaseOptions = {
        registry: `${registry.host}/${registryPath}`,
        key: key.name,
        keyring: key.secring,
        plainHttp: true,
        out,
        throwaway: true,
        ...(image ? { image } : {}),
      };
      const run = spawnSync(
        path.join(root, 'node_modules', '.bin', 'tsx'),
        [
          '-e',
          "import('./tools/release').then((m) => m.release(JSON.parse(process.env.RELEASE_OPTIONS ?? '')))",
        ],
        {
          cwd: root,
          encoding: 'utf8',
          env: { ...process.env, ...env, RELEASE_OPTIONS: JSON.stringify(options) },
        },
      );
      return { ...run, out };
    }

    /** That `repository` of the registry holds no tag (it was never pushed to). */
    function neverPushed(repository: string): void {
      const tags = skopeo(
        ['list-tags', '--tls-verify=false', `docker://${registry.host}/${repository}`],
        logins.REGISTRY_AUTH_FILE,
      );
      expect(tags.stderr).toMatch(/404/);
    }

    beforeAll(async () => {
      registry = await startRegistry({ logins: [releaser, reader], auth });
      logins = {
        REGISTRY_AUTH_FILE: path.join(work, `${auth}-auth.json`),
        HELM_REGISTRY_CONFIG: path.join(work, `${auth}-helm-registry.json`),
      };
      const skopeoLogin = spawnSync(
        'skopeo',
        [
          'login',
          ...['--authfile', logins.REGISTRY_AUTH_FILE, '--tls-verify=false'],
          ...['-u', releaser.username, '--password-stdin', registry.host],
        ],
        { input: releaser.password, encoding: 'utf8' },
      );
      expect(skopeoLogin.stderr).toBe('');
      const helmLogin = spawnSync(
        helm,
        [
          ...['registry', 'login', registry.host, '--plain-http'],
          ...['--registry-config', logins.HELM_REGISTRY_CONFIG],
          ...['--username', releaser.username, '--password-stdin'],
        ],
        { input: releaser.password, encoding: 'utf8' },
      );
      expect(helmLogin.status).toBe(0);
    });

    afterAll(async () => {
      await registry.stop();
    });

    it("When it is cut with the operator's logins, then it completes, and the SBOMs found from the image's digest with that login have the image as their subject, byte for byte as release.json records them", () => {
      // CI builds the image in its own step first; without it the release builds it.
      const cut = releaseWith(logins, 'released', imageExists(IMAGE) ? IMAGE : undefined);
      expect(cut.status === 0 ? '' : cut.stderr + cut.stdout).toBe('');
      const record = JSON.parse(readFileSync(path.join(cut.out, 'release.json'), 'utf8')) as ReleaseRecord;
      const image = `docker://${record.image}`;
      const referrers = `${image}:${record.imageDigest.replace(':', '-')}`;
      const read = (args: string[]) => skopeo(args, logins.REGISTRY_AUTH_FILE);

      // Without the login the registry shows nothing.
      const anonymous = skopeo(
        ['inspect', '--raw', '--tls-verify=false', referrers],
        authFile('none', registry.host),
      );
      expect(anonymous.status).not.toBe(0);
      expect(anonymous.stderr).toMatch(/unauthorized|authentication required/i);

      const index = read(['inspect', '--raw', '--tls-verify=false', referrers]);
      expect(index.stderr).toBe('');
      const listed = (JSON.parse(index.stdout) as { manifests: { digest: string; artifactType?: string }[] })
        .manifests;
      expect(listed.map((m) => m.artifactType)).toEqual([SBOM_MEDIA_TYPE, SBOM_MEDIA_TYPE]);
      expect(listed.map((m) => m.digest).sort()).toEqual(record.sboms.map((s) => s.manifestDigest).sort());

      for (const { digest } of listed) {
        const raw = read(['inspect', '--raw', '--tls-verify=false', `${image}@${digest}`]);
        expect(sha256(raw.stdout)).toBe(digest);
        const manifest = JSON.parse(raw.stdout) as {
          artifactType: string;
          subject: { digest: string };
          layers: { digest: string; annotations: Record<string, string> }[];
        };
        expect(manifest.artifactType).toBe(SBOM_MEDIA_TYPE);
        expect(manifest.subject.digest).toBe(record.imageDigest);
        // The operator's pull of the artifact, which checks it against its digest, holds the SBOM.
        const into = path.join(work, auth, `pulled-${digest.slice(-12)}`);
        const pulled = read(['copy', '--src-tls-verify=false', `${image}@${digest}`, `dir:${into}`]);
        expect(pulled.status === 0 ? '' : pulled.stderr).toBe('');
        const layer = manifest.layers[0];
        const file = readFileSync(path.join(into, (layer?.digest ?? '').replace('sha256:', '')));
        const title = layer?.annotations['org.opencontainers.image.title'] ?? '';
        expect(record.sboms.find((s) => s.manifestDigest === digest)?.file).toBe(title);
        expect(file.equals(readFileSync(path.join(cut.out, title)))).toBe(true);
      }

      const chart = read([
        'inspect',
        '--raw',
        '--tls-verify=false',
        `docker://${record.chart.replace(/^oci:\/\//, '')}:${record.chartVersion}`,
      ]);
      expect(sha256(chart.stdout)).toBe(record.chartDigest);
    });

    it('When helm has no login for the registry, though podman and skopeo have, then the release is refused naming the chart repository before the image is pushed', () => {
      const none = authFile(`${auth}-no-helm-login`, registry.host);
      const cut = releaseWith(
        { ...logins, HELM_REGISTRY_CONFIG: none },
        'no-helm-login',
        imageExists(IMAGE) ? IMAGE : undefined,
      );
      expect(cut.status).not.toBe(0);
      expect(cut.stderr).toContain(
        `${registry.host}/no-helm-login/charts/social-posts does not take pushes with no login`,
      );
      expect(cut.stderr).not.toContain(`${registry.host}/no-helm-login/social-posts does not take pushes`);
      neverPushed('no-helm-login/social-posts');
    });

    it("When the password is not the login's, then the release is refused naming each repository before anything is pushed", () => {
      const wrong = authFile(`${auth}-wrong`, registry.host, { ...releaser, password: 'not-the-password' });
      const cut = releaseWith(
        { REGISTRY_AUTH_FILE: wrong, HELM_REGISTRY_CONFIG: wrong },
        'wrong-password',
        'social-posts:never-built',
      );
      expect(cut.status).not.toBe(0);
      for (const repository of ['social-posts', 'charts/social-posts']) {
        expect(cut.stderr).toContain(
          `${registry.host}/wrong-password/${repository} does not take pushes with the login for it in ${wrong}: it answers 401`,
        );
        neverPushed(`wrong-password/${repository}`);
      }
    });

    if (auth === 'bearer')
      it('When the login may pull but not push, then the release is refused naming each repository before anything is pushed', () => {
        const readOnly = authFile('read-only', registry.host, reader);
        const cut = releaseWith(
          { REGISTRY_AUTH_FILE: readOnly, HELM_REGISTRY_CONFIG: readOnly },
          'read-only',
          imageExists(IMAGE) ? IMAGE : undefined,
        );
        expect(cut.status).not.toBe(0);
        for (const repository of ['social-posts', 'charts/social-posts']) {
          expect(cut.stderr).toContain(
            `${registry.host}/read-only/${repository} does not take pushes with the login for it in ${readOnly}: it answers 401`,
          );
          neverPushed(`read-only/${repository}`);
        }
      });
  },
);
