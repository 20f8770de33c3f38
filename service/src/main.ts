import { openDatabase } from './db/connection';
import { errorFields, errorWithHint, operatorHint } from './db/errors';
import { migrateWhenReachable } from './db/migrator';
import { consoleDestination, createLogger } from './logger';
import { startServer } from './server';
import { describeSettings, loadSettings, SettingsError } from './settings';
import { checkPorts, databaseProblem, listenProblem, StartupError } from './startup';

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

  // The stack only for whoever asked for detail: otherwise the one line says what to change.
  const detail = (error: unknown): object => (logger.isLevelEnabled('debug') ? errorWithHint(error) : {});
  function fail(error: unknown, line: string): never {
    logger.fatal(detail(error), `${line}; not starting`);
    process.exit(1);
  }

  try {
    await checkPorts(settings);
  } catch (error) {
    fail(error, error instanceof StartupError ? error.message : `start-up failed: ${String(error)}`);
  }
  const db = await openDatabase(settings, logger);
  try {
    await migrateWhenReachable(db, logger, settings.db.startupWaitSeconds * 1000);
  } catch (error) {
    await db.close().catch(() => undefined);
    const problem = settings.db.hostname ? databaseProblem(settings.db, error) : undefined;
    const hint = operatorHint(error);
    fail(error, problem ?? `migrations failed: ${errorFields(error).message}${hint ? ` (${hint})` : ''}`);
  }
  let listening;
  try {
    listening = await startServer(settings, db, logger);
  } catch (error) {
    const problem = listenProblem(settings, error);
    if (!problem) throw error;
    await db.close().catch(() => undefined);
    fail(error, problem);
  }
  const { port, metricsPort } = listening;
  logger.info(
    { port, metricsPort },
    `listening on http://localhost:${port} (docs at /docs; metrics at http://localhost:${metricsPort}/metrics)`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`start-up failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
