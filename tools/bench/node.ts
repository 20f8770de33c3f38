import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { ensureNode, nodeImage } from '../node-release';

/**
 * The Node release the bench runs its servers (service, reference, ladder rungs) on: by default
 * the image's (the Dockerfile's, unpacked by tools/node-release.ts), since that is what
 * production runs and Express's cost differs much between releases; `--node current` uses the
 * bench's own, `--node PATH` any binary. Both sides of every ratio run on the same one.
 */
export function serverNode(choice: string): { path: string; version: string } {
  const path =
    choice === 'image'
      ? join(ensureNode(nodeImage().version), 'bin', 'node')
      : choice === 'current'
        ? process.execPath
        : choice;
  const version = execFileSync(path, ['--version'], { encoding: 'utf8' }).trim();
  return { path, version };
}
