import { openDatabase } from './db/connection';
import { migrateDown, migrateToLatest, unlockMigrations } from './db/migrator';
import { consoleDestination, createLogger } from './logger';
import { loadSettings, SettingsError } from './settings';

/** Operators' migration commands: `latest` (default), `down` (last batch), `unlock`. */
async function run(command: string): Promise<void> {
  const settings = loadSettings();
  const logger = createLogger(settings.logLevel, consoleDestination(settings.nodeEnv));
  const db = await openDatabase(settings, logger);
  try {
    if (command === 'latest') await migrateToLatest(db, logger);
    else if (command === 'down') logger.info({ migrations: await migrateDown(db, logger) }, 'rolled back');
    else if (command === 'unlock') {
      await unlockMigrations(db);
      logger.info('migration lock released');
    } else throw new Error(`unknown command "${command}": use latest, down or unlock`);
  } finally {
    await db.close();
  }
}

run(process.argv[2] ?? 'latest').catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof SettingsError ? '' : 'migration failed: '}${error instanceof Error ? error.message : String(error)}\n`,
  );
  process.exit(1);
});
