import { consoleDestination, createLogger } from './logger';
import { describeSettings, loadSettings, SettingsError } from './settings';

/**
 * Process entry: settings → tracing, when a collector is set → database → migrations → listen
 * (serve.ts). Any failure before serving exits 1. The start-up line carries the settings in effect,
 * secrets left out.
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
  const tracing = settings.tracing.endpoint !== undefined;
  const logger = createLogger(settings.logLevel, consoleDestination(settings.nodeEnv), { traceIds: tracing });
  logger.info({ settings: describeSettings(settings) }, 'starting');
  if (settings.secretKeyGenerated) {
    logger.warn('SECRET_KEY is not set: tokens are signed with a random key and die with this process');
  }
  /* eslint-disable @typescript-eslint/no-require-imports -- loaded on demand: without a
     collector the SDK is never loaded at all */
  if (tracing)
    (require('./tracing-sdk') as typeof import('./tracing-sdk')).startTracing(settings.tracing, logger);
  const { serve } = require('./serve') as typeof import('./serve');
  /* eslint-enable @typescript-eslint/no-require-imports */
  await serve(settings, logger);
}

main().catch((error: unknown) => {
  process.stderr.write(`start-up failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
