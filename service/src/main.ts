import { openDatabase } from './db/connection';
import { errorWithHint } from './db/errors';
import { migrateWhenReachable } from './db/migrator';
import { consoleDestination, createLogger } from './logger';
import { startServer } from './server';
import { describeSettings, loadSettings, SettingsError } from './settings';

/**
 * Process entry: settings → database → migrations → listen (API and metrics). Any failure before
 * serving exits 1. The start-up line carries the settings in effect, secrets left out.
 */
async function main(): Promise<void> {
  let settings;
  try {
    settings = loadSettings();
  } catch (error) {
    if (error instanceof SettingsError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(1);
    }
    throw error;
  }
  const logger = createLogger(settings.logLevel, consoleDestination(settings.nodeEnv));
  logger.info({ settings: describeSettings(settings) }, 'starting');
  if (settings.secretKeyGenerated) {
    logger.warn('SECRET_KEY is not set: tokens are signed with a random key and die with this process');
  }

  const db = await openDatabase(settings, logger);
  try {
    await migrateWhenReachable(db, logger, settings.db.startupWaitSeconds * 1000);
  } catch (error) {
    logger.fatal(errorWithHint(error), 'migrations failed; not starting');
    await db.close().catch(() => undefined);
    process.exit(1);
  }
  const { port, metricsPort } = await startServer(settings, db, logger);
  logger.info(
    { port, metricsPort },
    `listening on http://localhost:${port} (docs at /docs; metrics at http://localhost:${metricsPort}/metrics)`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`start-up failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
