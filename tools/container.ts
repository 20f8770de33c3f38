/**
 * The container engine and the service's image, for the image build, its stand-in base and the
 * k8s-tests runner. docker when its engine answers, else podman with what works on a root machine
 * without a Docker daemon and with hybrid cgroups (vfs storage, cgroupfs, runc as crun fails there)
 * and explicit ulimits (podman's defaults exceed what the caller may set).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { previousRelease } from './harness/releases';
import { nodeImage, repoRoot } from './node-release';

export const IMAGE = 'social-posts:local';

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
    const [root, runRoot] = podmanStore();
    detected = {
      name: 'podman',
      command: [
        'podman',
        ...['--root', root, '--runroot', runRoot, '--storage-driver', 'vfs'],
        ...['--cgroup-manager', 'cgroupfs', '--runtime', 'runc'],
      ],
    };
  } else {
    throw new Error('no container engine: neither `docker info` answers nor podman is installed');
  }
  return detected;
}

/**
 * A podman store of the project's own: podman records the storage driver of the store it first
 * opens and refuses any other, so a default store another podman command opened first would
 * refuse vfs, and the vfs store would refuse the machine's own podman commands.
 */
function podmanStore(): [string, string] {
  if (process.getuid?.() === 0) return ['/var/lib/containers/social-posts', '/run/containers/social-posts'];
  const data = process.env.XDG_DATA_HOME ?? join(homedir(), '.local', 'share');
  return [
    join(data, 'containers', 'social-posts'),
    join(process.env.XDG_RUNTIME_DIR ?? tmpdir(), 'containers-social-posts'),
  ];
}

/** The engine's program and its arguments for `args`. */
export function commandLine(args: string[]): [string, string[]] {
  const [command, ...rest] = [...engine().command, ...args];
  if (!command) throw new Error('no container engine');
  return [command, rest];
}

export function run(args: string[], options: { quiet?: boolean } = {}): string {
  return execFileSync(...commandLine(args), {
    encoding: 'utf8',
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', options.quiet ? 'pipe' : 'inherit'],
    maxBuffer: 64 * 1024 * 1024,
  });
}

/** Whether the engine command succeeds within the time; its output is dropped. */
export function succeeds(args: string[], timeoutMs: number): boolean {
  return spawnSync(...commandLine(args), { stdio: 'ignore', timeout: timeoutMs }).status === 0;
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

/**
 * The certificate authorities this machine's npm trusts beyond Node's own (`npm config get
 * cafile`, e.g. a TLS-inspecting egress proxy's), or undefined when it trusts Node's alone.
 */
function hostNpmCaFile(): string | undefined {
  const result = spawnSync('npm', ['config', 'get', 'cafile'], { encoding: 'utf8' });
  const file = result.stdout.trim();
  return file && file !== 'null' && existsSync(file) ? file : undefined;
}

/**
 * Builds `context`'s Dockerfile into `tag` (its default stage, or `target`), its base already
 * stored. With podman: `build --network host` and the ulimits of `runLimits()`, and npm in the
 * build stages trusting what this machine's npm trusts.
 */
export function build(context: string, tag: string, log: (message: string) => void, target?: string): void {
  const options: string[] = [];
  const scratch = mkdtempSync(join(tmpdir(), 'social-posts-build-'));
  try {
    if (engine().name === 'podman') {
      options.push('--network', 'host', ...runLimits());
      // Build-time volumes (podman only) carry the CA in without a Dockerfile change and without
      // entering a layer.
      const caFile = hostNpmCaFile();
      if (caFile) {
        const npmrc = join(scratch, 'npmrc');
        writeFileSync(npmrc, 'cafile=/run/social-posts-build/ca.crt\n');
        options.push('--volume', `${caFile}:/run/social-posts-build/ca.crt:ro`);
        options.push('--volume', `${npmrc}:/root/.npmrc:ro`);
        log(`npm in the build trusts this machine's npm cafile ${caFile} (mounted for the build only)`);
      }
    }
    const args = [
      'build',
      ...options,
      '--tag',
      tag,
      ...(target ? ['--target', target] : []),
      '--file',
      'Dockerfile',
      '.',
    ];
    execFileSync(...commandLine(args), { cwd: context, stdio: 'inherit' });
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** Whether the engine stores an image under this reference. */
export function imageExists(reference: string): boolean {
  return succeeds(['image', 'inspect', reference], 60_000);
}

export interface HistoryEntry {
  id: string;
  size: number;
  createdBy: string;
}

export function history(reference: string): HistoryEntry[] {
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

/** The previous release's image (`npm run image:previous`), tagged with its version. */
export function previousImage(): string {
  return `social-posts:${previousRelease().version}`;
}
