import { openDatabase } from './db/connection';
import { errorFields, errorWithHint, operatorHint } from './db/errors';
import { migrateWhenReachable } from './db/migrator';
import type { Logger } from './logger';
import { startServer } from './server';
import type { Settings } from './settings';
import { checkPorts, databaseProblem, listenProblem, StartupError, durabilityProblem } from './startup';

/**
 * Ports → database → migrations → the server's durability settings → listen (API and metrics); any
 * failure before serving exits 1 with one line naming what to change. Loaded by main.ts only after
 * tracing has started, as it loads pg.
 * @public main.ts loads it with require(), which knip does not follow.
 */
export async function serve(settings: Settings, logger: Logger): Promise<void> {
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
  const closeAndFail = async (error: unknown, line: string): Promise<never> => {
    await db.close().catch(() => undefined);
    fail(error, line);
  };
  try {
    await migrateWhenReachable(db, logger, settings.db.startupWaitSeconds * 1000);
  } catch (error) {
    const problem = settings.db.hostname ? databaseProblem(settings.db, error) : undefined;
    const hint = operatorHint(error);
    return closeAndFail(
      error,
      problem ?? `migrations failed: ${errorFields(error).message}${hint ? ` (${hint})` : ''}`,
    );
  }
  // The embedded database has no standby, and its settings are this process's own.
  const unsafe = settings.db.hostname
    ? await durabilityProblem(db, settings.db).catch((error: unknown) =>
        closeAndFail(
          error,
          `the server's settings (pg_settings) could not be read on DB_NAME=${settings.db.name}: ${errorFields(error).message}`,
        ),
      )
    : undefined;
  if (unsafe) return closeAndFail(undefined, unsafe);
  let listening;
  try {
    listening = await startServer(settings, db, logger);
  } catch (error) {
    const problem = listenProblem(settings, error);
    if (!problem) throw error;
    return closeAndFail(error, problem);
  }
  const { port, metricsPort } = listening;
  logger.info(
    { port, metricsPort },
    `listening on http://localhost:${port} (docs at /docs; metrics at http://localhost:${metricsPort}/metrics)`,
  );
}
