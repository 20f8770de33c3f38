/**
 * A migrated embedded database made once and copied for each test file that wants one. A new
 * PGlite database runs initdb, which costs tens of seconds on a busy machine; opening a copy of
 * one already made and migrated costs a few. The copy is a plain PGlite data directory, so a
 * service started as a child process opens it through DB_EMBEDDED_DIR like any other.
 */
import { createHash } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openDatabase } from '../../service/src/db/connection';
import { migrateToLatest } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import { loadSettings } from '../../service/src/settings';
import { serviceEnv } from './env';

const ROOT = path.join(__dirname, '..', '..');

/** The variable through which the suite's set-up tells its test files where the template is. */
export const TEMPLATE_VARIABLE = 'SP_TEST_PGLITE_TEMPLATE';

/**
 * What the template depends on: the migrations, the code that opens the database and runs them,
 * and the PGlite release that wrote the files.
 */
function fingerprint(): string {
  const hash = createHash('sha256');
  const migrations = path.join(ROOT, 'migrations');
  const files = [
    ...readdirSync(migrations)
      .sort()
      .map((name) => path.join(migrations, name)),
    ...['migrator.ts', 'embedded.ts', 'concurrent-index.ts', 'lock.ts'].map((name) =>
      path.join(ROOT, 'service', 'src', 'db', name),
    ),
    path.join(ROOT, 'node_modules', '@electric-sql', 'pglite', 'package.json'),
  ];
  for (const file of files) hash.update(path.relative(ROOT, file)).update(readFileSync(file));
  return hash.digest('hex').slice(0, 16);
}

/**
 * The template's folder, made (PGlite's initdb, then the migrations) when this fingerprint has
 * none yet. Kept under node_modules/.cache, so later runs, and a run of one file, skip the making.
 */
export async function ensureTemplate(): Promise<string> {
  const cache = path.join(ROOT, 'node_modules', '.cache', 'social-posts');
  const template = path.join(cache, `pglite-migrated-${fingerprint()}`);
  if (existsSync(template)) return template;
  mkdirSync(cache, { recursive: true });
  // Made aside and renamed into place: a run that stops half-way leaves no half-made template.
  const making = mkdtempSync(path.join(cache, 'pglite-making-'));
  try {
    const settings = loadSettings(serviceEnv({ DB_EMBEDDED_DIR: making }, 'embedded'));
    const logger = createLogger('silent');
    const db = await openDatabase(settings, logger);
    try {
      await migrateToLatest(db, logger);
    } finally {
      await db.close();
    }
    renameSync(making, template);
  } catch (error) {
    rmSync(making, { recursive: true, force: true });
    // Another run renamed its own into place first: that one serves as well.
    if (!existsSync(template)) throw error;
  }
  return template;
}

/** A fresh copy of the template, or undefined when this run made none (then: a new in-memory one). */
export function copyTemplate(): { dir: string; remove(): void } | undefined {
  const template = process.env[TEMPLATE_VARIABLE];
  if (!template) return undefined;
  const dir = mkdtempSync(path.join(tmpdir(), 'sp-pglite-'));
  cpSync(template, dir, { recursive: true });
  return {
    dir,
    remove: () => {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
