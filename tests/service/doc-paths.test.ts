/**
 * Every path of this repository that the documentation names exists: a file moved or renamed
 * leaves no reader following a pointer to nothing. Read are README.md, docs/ and chart/README.md:
 * their relative links, and the paths they quote in backticks that begin with a folder of the
 * repository (or of service/src or chart/, which the docs name from inside), or with `test/` or
 * `tests/`. A path of another project is written as a link to it, which this does not follow.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describeOnEmbedded } from './helpers';

const ROOT = path.join(__dirname, '..', '..');
/** Folders a quoted path is looked up from, besides the root and the document's own. */
const BASES = ['service/src', 'chart'];

const documents = [
  'README.md',
  'chart/README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** First folders that mark a quoted path as one of this repository's. */
const roots = new Set([
  ...readdirSync(ROOT),
  ...BASES.flatMap((base) => readdirSync(path.join(ROOT, base))),
  'test',
  'tests',
]);

/**
 * A quoted file or folder: segments joined by `/`, a file's name with an extension or a trailing
 * `/`. A pattern (`ci/*-values.yaml`) names no one file and is left alone.
 */
const QUOTED_PATH = /^[\w.@-]+(\/[\w.@-]+)*(\.[a-z]+|\/)$/;

function exists(document: string, target: string): boolean {
  const from = [ROOT, path.dirname(path.join(ROOT, document)), ...BASES.map((base) => path.join(ROOT, base))];
  return from.some((dir) => existsSync(path.join(dir, target)));
}

function missingPaths(document: string): string[] {
  const text = readFileSync(path.join(ROOT, document), 'utf8');
  const missing: string[] = [];
  for (const [, target] of text.matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)) {
    if (!target || /^[a-z]+:/.test(target)) continue;
    if (!existsSync(path.join(path.dirname(path.join(ROOT, document)), target))) missing.push(target);
  }
  for (const [, quoted] of text.matchAll(/`([^`\s]+)`/g)) {
    if (!quoted?.includes('/') || !QUOTED_PATH.test(quoted)) continue;
    const first = quoted.split('/')[0] ?? '';
    if (!roots.has(first)) continue;
    if (!exists(document, quoted)) missing.push(quoted);
  }
  return missing;
}

// Files only: the embedded pass runs it, the PostgreSQL pass need not repeat it.
describeOnEmbedded('Paths the documentation names', () => {
  test.each(documents)('When %s is read, then every repository path it names exists', (document) => {
    expect(missingPaths(document)).toEqual([]);
  });
});
