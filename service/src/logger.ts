import pino, { type DestinationStream, type Logger } from 'pino';
import type { Settings } from './settings';

export type { Logger };

/**
 * Paths never written to the log. The request log serializes only id, method, path and status,
 * and the start-up line only describeSettings(); these catch a stray object logged by mistake.
 */
export const REDACTED_PATHS = [
  'password',
  '*.password',
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'headers.cookie',
  '*.headers.cookie',
  'access_token',
  '*.access_token',
  'token',
  '*.token',
  'secretKey',
  '*.secretKey',
  'SECRET_KEY',
  '*.SECRET_KEY',
  'DB_PASSWORD',
  '*.DB_PASSWORD',
];

/** One JSON object per line on stdout (or `destination`, for tests), the form log collectors in a cluster expect. */
export function createLogger(level: Settings['logLevel'], destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'social-posts' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    },
    destination,
  );
}
