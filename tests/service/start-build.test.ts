/**
 * `npm start` compiles first (its prestart step); these cases run that step in a copy of the
 * project, so the repository's own dist/ is left alone.
 */
import { execFileSync } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../../tools/harness/service';
import { describeOnEmbedded } from './helpers';

const INPUTS = [
  'service/src',
  'migrations',
  'package.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'package-lock.json',
];
let copy = '';

beforeAll(() => {
  copy = mkdtempSync(path.join(tmpdir(), 'start-build-'));
  for (const input of INPUTS) cpSync(path.join(ROOT, input), path.join(copy, input), { recursive: true });
  mkdirSync(path.join(copy, 'tools'));
  cpSync(path.join(ROOT, 'tools/build-if-changed.mjs'), path.join(copy, 'tools/build-if-changed.mjs'));
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules'), 'dir');
});
afterAll(() => {
  rmSync(copy, { recursive: true, force: true });
});

const prestart = (): string =>
  execFileSync(process.execPath, ['tools/build-if-changed.mjs'], {
    cwd: copy,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
const compiled = (file: string) => path.join(copy, 'dist', file);

// No database is involved: the embedded pass runs it, the PostgreSQL pass need not repeat it.
describeOnEmbedded('The build before npm start', () => {
  it('When nothing was built, then it compiles; when nothing changed since, it compiles nothing; after an edit, the edit is compiled', () => {
    const first = prestart();
    expect(first).toMatch(/^build: compiling the service into dist\/ \(the first build takes a while/m);
    expect(first).toMatch(/^build: done in \d+\.\d s$/m);
    expect(existsSync(compiled('service/src/main.js'))).toBe(true);
    expect(existsSync(compiled('migrations/index.js'))).toBe(true);

    expect(prestart()).toContain('dist/ is current, nothing to compile');

    appendFileSync(
      path.join(copy, 'service/src/settings.ts'),
      '\nexport const EDITED_FOR_THE_BUILD_TEST = 42;\n',
    );
    const again = prestart();
    expect(again).toMatch(/^build: sources changed, compiling what changed into dist\/$/m);
    expect(again).toMatch(/^build: done in \d+\.\d s$/m);
    expect(readFileSync(compiled('service/src/settings.js'), 'utf8')).toContain('EDITED_FOR_THE_BUILD_TEST');
    expect(prestart()).toContain('nothing to compile');
  }, 180_000);

  it('When a source does not compile, then the step fails, the next start tries again, and once the source is gone the last good build stands', () => {
    const broken = path.join(copy, 'migrations/broken-for-the-build-test.ts');
    appendFileSync(broken, 'export const notANumber: number = "text";\n');
    try {
      expect(() => prestart()).toThrow();
      expect(() => prestart()).toThrow();
    } finally {
      rmSync(broken);
    }
    expect(prestart()).toContain('nothing to compile');
  }, 180_000);
});
