/**
 * `npm run image:previous [-- --force]`: the previous release's image for k8s:local's upgrade case,
 * built as `image:build` builds today's from its recorded commit's files, tagged
 * `social-posts:<version>`; a tag already stored is kept unless `--force`.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hasCommit, previousRelease } from './harness/releases';
import { build, engine, imageExists, previousImage } from './container';
import { nodeImage, repoRoot } from './node-release';
import { ensureBase } from './stand-in-base';

function log(message: string): void {
  process.stdout.write(`[image:previous] ${message}\n`);
}

/** The release's files at its commit, in a scratch folder. */
function checkOut(commit: string): string {
  if (!hasCommit(commit, repoRoot))
    throw new Error(
      `commit ${commit} is not in this clone's history (a shallow clone? git fetch --unshallow)`,
    );
  const folder = mkdtempSync(join(tmpdir(), 'social-posts-release-'));
  const archive = join(folder, '.release.tar');
  execFileSync('git', ['archive', '--format=tar', '--output', archive, commit], { cwd: repoRoot });
  execFileSync('tar', ['-x', '-f', archive, '-C', folder]);
  rmSync(archive);
  return folder;
}

function main(): void {
  const started = Date.now();
  const release = previousRelease();
  const tag = previousImage();
  if (!release.commit) throw new Error(`release ${release.version} has no recorded commit`);
  if (imageExists(tag) && !process.argv.includes('--force')) {
    log(`${tag} is stored already: kept (--force builds it again)`);
    return;
  }
  log(`${tag} from commit ${release.commit} (release ${release.version}, chart ${release.chartVersion})`);
  const context = checkOut(release.commit);
  try {
    // Only today's base can be stood in for; an older release on another base needs it pulled.
    const reference = /^ARG NODE_IMAGE=(\S+)$/m.exec(readFileSync(join(context, 'Dockerfile'), 'utf8'))?.[1];
    const today = nodeImage();
    if (reference !== today.reference)
      throw new Error(
        `the release's Dockerfile is based on ${reference ?? '(no ARG NODE_IMAGE)'}, today's on ${today.reference}: only today's base is built here`,
      );
    log(`engine: ${engine().name}; base ${today.fullName} (${ensureBase(log)})`);
    build(context, tag, log);
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
  log(`built ${tag} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

try {
  main();
} catch (error) {
  process.stderr.write(
    `[image:previous] failed: ${error instanceof Error ? error.message : String(error)}\n`,
  );
  process.exit(1);
}
