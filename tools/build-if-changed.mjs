/**
 * `npm start`'s build step: compiles the service into dist/ only when an input changed since the
 * last build, so a second start goes straight to the process. Inputs are the compiled sources and
 * what decides how they compile; a file added, removed or touched changes the fingerprint.
 * Plain JavaScript, so it runs before anything is compiled and on any supported Node.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = join(import.meta.dirname, '..');
const TREES = ['service/src', 'migrations'];
const FILES = ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json'];
const STAMP = join(root, 'dist', '.build-inputs');
const ENTRY = join(root, 'dist', 'service', 'src', 'main.js');

function* walk(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(full);
    else yield full;
  }
}

function fingerprint() {
  const files = [...TREES.flatMap((tree) => [...walk(join(root, tree))]), ...FILES.map((f) => join(root, f))];
  const hash = createHash('sha256');
  for (const file of files.sort()) {
    const { size, mtimeMs } = statSync(file);
    hash.update(`${relative(root, file)}\0${String(size)}\0${String(mtimeMs)}\n`);
  }
  return hash.digest('hex');
}

const before = fingerprint();
const current = existsSync(ENTRY) && existsSync(STAMP) && readFileSync(STAMP, 'utf8') === before;
if (current) {
  process.stdout.write('build: dist/ is current, nothing to compile\n');
} else {
  const first = !existsSync(join(root, 'dist', '.tsbuildinfo'));
  // tsc prints nothing until it is done: say what is happening and that it is only this once.
  process.stdout.write(
    first
      ? 'build: compiling the service into dist/ (the first build takes a while; later starts only compile what changed)\n'
      : 'build: sources changed, compiling what changed into dist/\n',
  );
  const started = Date.now();
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  // Incremental: after an edit only what the edit touches is checked and written again.
  execFileSync(
    process.execPath,
    [tsc, '-p', 'tsconfig.build.json', '--incremental', '--tsBuildInfoFile', 'dist/.tsbuildinfo'],
    { cwd: root, stdio: 'inherit' },
  );
  // The fingerprint taken before compiling: an edit made during the build is seen next time.
  writeFileSync(STAMP, before);
  process.stdout.write(`build: done in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}
