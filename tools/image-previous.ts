/**
 * `npm run image:previous`: the previous release's image (tools/harness/releases.ts), built from its
 * recorded commit out of this clone's own history, for the upgrade case of k8s:local. The commit's
 * files (`git archive`) go to a scratch folder whose Dockerfile is built as `npm run image:build`
 * builds today's (tools/container.ts `build()`: the same engine settings and, where no registry
 * is reachable, the same stand-in base), tagged `social-posts:<version>`; `social-posts:local` is
 * left alone. A tag already stored is kept (`--force` builds it again).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { previousRelease } from './harness/releases';
import { build, engine, imageExists, previousImage } from './container';
import { nodeImage, repoRoot } from './node-release';
import { ensureBase } from './stand-in-base';

function log(message: string): void {
  process.stdout.write(`[image:previous] ${message}\n`);
}

/** The release's files at its commit, in a scratch folder. */
function checkOut(commit: string): string {
  const git = (args: string[], options: { stdio?: 'ignore' } = {}) =>
    execFileSync('git', args, { cwd: repoRoot, encoding: 'utf8', ...options });
  try {
    git(['cat-file', '-e', `${commit}^{commit}`], { stdio: 'ignore' });
  } catch {
    throw new Error(
      `commit ${commit} is not in this clone's history (a shallow clone? git fetch --unshallow)`,
    );
  }
  const folder = mkdtempSync(join(tmpdir(), 'social-posts-release-'));
  const archive = join(folder, '.release.tar');
  git(['archive', '--format=tar', '--output', archive, commit]);
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
