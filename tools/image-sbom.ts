/**
 * The image's contents in CycloneDX by cdxgen reading its file system (its Trivy plugin for the
 * Debian packages, its own readers for the npm packages). cdxgen and its plugin binaries are pinned
 * here and installed once into the git-ignored .tools/: as devDependencies every `npm ci` would pay
 * for binaries only a release uses.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { run } from './container';
import { repoRoot } from './node-release';
import { intoPlace } from './npm-pack';

/** cdxgen's release and the plugin release it names among its optional dependencies. */
const CDXGEN = { version: '12.8.4', plugins: '2.5.1' } as const;

const PLUGIN_PLATFORMS: Partial<Record<NodeJS.Architecture, string>> = { x64: 'amd64', arm64: 'arm64' };

/** The cdxgen command, installed with its plugins for this machine if it is not yet. */
function ensureCdxgen(): string {
  const platform = PLUGIN_PLATFORMS[process.arch];
  if (process.platform !== 'linux' || !platform)
    throw new Error(`cdxgen's plugin binaries are installed here for linux on x64 or arm64 only`);
  const target = path.join(repoRoot, '.tools', `cdxgen-${CDXGEN.version}-${CDXGEN.plugins}`);
  intoPlace(target, (staging) => {
    execFileSync(
      'npm',
      [
        'install',
        '--prefix',
        staging,
        '--no-save',
        '--no-package-lock',
        '--no-audit',
        '--no-fund',
        '--ignore-scripts',
        // The other platforms' plugins and cdxgen's optional analysers are not used here.
        '--omit',
        'optional',
        `@cyclonedx/cdxgen@${CDXGEN.version}`,
        `@cdxgen/cdxgen-plugins-bin-linux-${platform}@${CDXGEN.plugins}`,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    return staging;
  });
  return path.join(target, 'node_modules', '.bin', 'cdxgen');
}

/** The image SBOM's file name, also its title in the registry. */
export const IMAGE_SBOM_FILE = 'sbom-image.cdx.json';

/**
 * Writes the SBOM of a local image (`name`, as the engine knows it) into `out`, as the release's
 * component `social-posts` at `version`; returns the file's path. cdxgen reads the image's file
 * system exported from a container of it: given the image's archive, its own extraction leaves out
 * every path containing `logs/` (among paths it lists as failing to extract), which drops packages
 * such as @opentelemetry/sdk-logs from the service's node_modules.
 */
export function imageSbom(image: string, version: string, out: string): string {
  const cdxgen = ensureCdxgen();
  const work = mkdtempSync(path.join(tmpdir(), 'social-posts-image-sbom-'));
  const file = path.join(out, IMAGE_SBOM_FILE);
  const container = run(['create', image], { quiet: true }).trim();
  try {
    const archive = path.join(work, 'rootfs.tar');
    run(['export', '-o', archive, container], { quiet: true });
    const rootfs = path.join(work, 'rootfs');
    mkdirSync(rootfs);
    execFileSync('tar', ['-xf', archive, '-C', rootfs], { stdio: ['ignore', 'ignore', 'pipe'] });
    execFileSync(
      cdxgen,
      ['-t', 'rootfs', '--project-name', 'social-posts', '--project-version', version, '-o', file, rootfs],
      // cdxgen prints its whole inventory and a warning table; its errors still reach stderr.
      { stdio: ['ignore', 'ignore', 'pipe'], maxBuffer: 64 * 1024 * 1024, cwd: work },
    );
  } finally {
    run(['rm', container], { quiet: true });
    rmSync(work, { recursive: true, force: true });
  }
  return file;
}
