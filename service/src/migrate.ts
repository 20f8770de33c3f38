import { openDatabase } from './db/connection';
import { EmbeddedInUseError } from './db/embedded';
import {
  appliedMigrations,
  knownMigrations,
  migrateDownTo,
  migrateToLatest,
  unlockMigrations,
} from './db/migrator';
import { consoleDestination, createLogger } from './logger';
import { loadSettings, SettingsError } from './settings';

const USAGE = 'use latest, status, down --to <migration> or unlock';

class UsageError extends Error {}

/** A migration named in full or by its number (the part before the first `_`). */
function migrationNamed(given: string | undefined): string {
  if (!given)
    throw new UsageError(
      'down needs --to <migration>: the last migration to keep (migrate status lists them)',
    );
  return knownMigrations().find((name) => name === given || name.startsWith(`${given}_`)) ?? given;
}

/** One line per migration: applied or pending, and those a newer release applied. */
function status(applied: string[]): string {
  const known = knownMigrations();
  const lines = [...new Set([...known, ...applied])]
    .sort()
    .map((name) =>
      !known.includes(name)
        ? `applied  ${name}  (not in this build: a newer release's)`
        : `${applied.includes(name) ? 'applied' : 'pending'}  ${name}`,
    );
  return `${lines.join('\n')}\n`;
}

/**
 * Operators' migration commands: `latest` (default), `status`, `down --to <migration>` (undo every
 * migration after it, for a rollback to a release that ends there) and `unlock`.
 */
async function run(args: string[]): Promise<void> {
  const [command = 'latest', ...rest] = args;
  if (!['latest', 'status', 'down', 'unlock'].includes(command))
    throw new UsageError(`unknown command "${command}": ${USAGE}`);
  // Before the database: a mistyped command changes nothing.
  const keep = command === 'down' ? migrationNamed(rest[0] === '--to' ? rest[1] : undefined) : null;
  const settings = loadSettings();
  const logger = createLogger(settings.logLevel, consoleDestination(settings.nodeEnv));
  const db = await openDatabase(settings, logger);
  try {
    if (command === 'latest') await migrateToLatest(db, logger);
    else if (command === 'status') process.stdout.write(status(await appliedMigrations(db.knex)));
    else if (command === 'down') {
      const undone = await migrateDownTo(db, logger, keep);
      logger.info(
        { migrations: undone },
        undone.length > 0 ? 'rolled back' : `nothing after ${String(keep)}`,
      );
    } else {
      await unlockMigrations(db);
      logger.info('migration lock released');
    }
  } finally {
    await db.close();
  }
}

run(process.argv.slice(2)).catch((error: unknown) => {
  // A setting at fault, or a command the database never saw, says so alone; a migration's failure says which step.
  const plain =
    error instanceof SettingsError || error instanceof UsageError || error instanceof EmbeddedInUseError;
  process.stderr.write(
    `${plain ? '' : 'migration failed: '}${error instanceof Error ? error.message : String(error)}\n`,
  );
  process.exit(1);
});
