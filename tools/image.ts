/**
 * `npm run image:build`: builds the Dockerfile as it is into `social-posts:local` (its base pulled
 * or stood in for by tools/stand-in-base.ts), then prints the image's size and each layer's, and
 * what the service adds on top of the base, built as `build()` of tools/container.ts does.
 */
import { build, engine, history, IMAGE, imageFacts, mb, type ImageFacts } from './container';
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

function buildImage(): void {
  const base = ensureBase(log);
  log(`engine: ${engine().name}; base ${nodeImage().fullName} (${base})`);
  const started = Date.now();
  build(repoRoot, IMAGE, log);
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
