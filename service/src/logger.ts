import pino, { type DestinationStream, type Level, type Logger } from 'pino';
import { traceIds } from './tracing';

export type { Logger };

/**
 * Paths never written to the log. The request log serializes only id, method, path and status,
 * and the start-up line only describeSettings(); these catch a stray object logged by mistake.
 */
const REDACTED_PATHS = [
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
  'secretKeysAccepted',
  '*.secretKeysAccepted',
  'SECRET_KEYS_ACCEPTED',
  '*.SECRET_KEYS_ACCEPTED',
  'DB_PASSWORD',
  '*.DB_PASSWORD',
];

/**
 * How the process writes its log. JSON (one object a line, what a cluster's log collector reads)
 * everywhere but for a person at a terminal in development: not in production, not under CI
 * (CI set to anything but "false" or "0"), not when stdout is a pipe or a file.
 */
export function logFormat(nodeEnv: string, ci: string | undefined, isTTY: boolean): 'pretty' | 'json' {
  const underCi = ci !== undefined && ci !== '' && ci !== 'false' && ci !== '0';
  return nodeEnv !== 'production' && !underCi && isTTY ? 'pretty' : 'json';
}

/** Typed as a boolean, isTTY is undefined when stdout is a pipe or a file. */
const stdoutIsTerminal = (): boolean => (process.stdout as { isTTY?: boolean }).isTTY === true;

/**
 * The destination for this process's log: human-readable lines when logFormat says so and
 * pino-pretty is installed (a development dependency: the production image has none), otherwise
 * undefined, which is pino's JSON on stdout.
 */
export function consoleDestination(nodeEnv: string): DestinationStream | undefined {
  if (logFormat(nodeEnv, process.env.CI, stdoutIsTerminal()) !== 'pretty') return undefined;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- optional, see above
    const pretty = require('pino-pretty') as (options: object) => DestinationStream;
    // sync: the lines before a start-up failure's exit are not lost.
    return pretty({ colorize: true, sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'service' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw error;
    return undefined;
  }
}

/**
 * A logger writing to `destination` (consoleDestination, or a test's stream); stdout as JSON without
 * one. With `traceIds` (tracing on) each line inside a span carries its trace_id and span_id.
 */
export function createLogger(
  level: Level | 'silent',
  destination?: DestinationStream,
  { traceIds: withTraceIds = false }: { traceIds?: boolean } = {},
): Logger {
  return pino(
    {
      level,
      ...(withTraceIds ? { mixin: traceIds } : {}),
      base: { service: 'social-posts' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    },
    destination,
  );
}
