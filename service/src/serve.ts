import { openDatabase } from './db/connection';
import { errorWithHint } from './db/errors';
import { migrateWhenReachable } from './db/migrator';
import type { Logger } from './logger';
import { startServer } from './server';
import type { Settings } from './settings';

/**
 * Database → migrations → listen (API and metrics); a failure of the migrations exits 1. Loaded by
 * main.ts only after tracing has started, as it loads http, express and pg.
 */
export async function serve(settings: Settings, logger: Logger): Promise<void> {
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
