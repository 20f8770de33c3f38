/**
 * `npm run image:build`: builds the Dockerfile as it is into `social-posts:local` (its base pulled
 * or stood in for by scripts/stand-in-base.ts), then prints the image's size and each layer's, and
 * what the service adds on top of the base. With podman: `build --network host` and the ulimits
 * of `runLimits()` (scripts/container.ts).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engine, history, IMAGE, imageFacts, mb, runLimits, type ImageFacts } from './container';
import { nodeImage, repoRoot } from './node-release';
import { ensureBase } from './stand-in-base';

function log(message: string): void {
  process.stdout.write(`[image] ${message}\n`);
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

function buildImage(): void {
  const { name } = engine();
  const base = ensureBase(log);
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

function main(): void {
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

main();
