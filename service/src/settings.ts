import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Joi from 'joi';
import type { DatabaseConfig } from './db/connection';

/** Every setting the service reads, typed and validated once at start-up. */
export interface Settings {
  nodeEnv: 'development' | 'production' | 'test';
  port: number;
  /** Port of the Prometheus metrics listener, kept apart from the API so no ingress can expose it. */
  metricsPort: number;
  db: DatabaseConfig;
  secretKey: string;
  /** True when SECRET_KEY was not set and a random one was made for this process. */
  secretKeyGenerated: boolean;
  /**
   * Further keys whose tokens are accepted but never signed with: during a rotation the next key
   * (before it signs) or the previous one (until its tokens have expired). Never SECRET_KEY itself.
   */
  secretKeysAccepted: string[];
  accessTokenExpireMinutes: number;
  corsAllowedOrigins: string[];
  bcryptRounds: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  shutdownDelaySeconds: number;
  shutdownTimeoutSeconds: number;
}

/** Raised for a bad setting; its message is the one line printed before the process exits. */
export class SettingsError extends Error {
  override name = 'SettingsError';
}

const ORIGIN = /^https?:\/\/[^\s/?#*]+$/;

const originList = Joi.string()
  .allow('')
  .custom((value: string, helpers) => {
    const origins = value
      .split(',')
      .map((o) => o.trim())
      .filter((o) => o !== '');
    for (const origin of origins) {
      // An origin is scheme://host[:port]: no path, no wildcard; the browser compares it byte for byte.
      if (!ORIGIN.test(origin))
        return helpers.message({
          custom: `has "${origin}", which is not an origin like https://app.example.com`,
        });
    }
    return origins;
  });

/** SECRET_KEY's own rule, which each key of SECRET_KEYS_ACCEPTED meets too. */
const SECRET_KEY_MIN_LENGTH = 32;

const keyList = Joi.string()
  .allow('')
  .custom((value: string, helpers) => {
    // A value of only blanks (an empty line in a Secret) is no key at all, like ''.
    if (value.trim() === '') return [];
    const keys = value.split(',').map((k) => k.trim());
    // Entries are named by position: a message never carries a key.
    const at = (i: number) => `entry ${i + 1} of ${keys.length}`;
    for (const [i, key] of keys.entries()) {
      if (key === '') return helpers.message({ custom: `has an empty ${at(i)}; remove the extra comma` });
      if (key.length < SECRET_KEY_MIN_LENGTH)
        return helpers.message({
          custom: `has ${at(i)} shorter than ${SECRET_KEY_MIN_LENGTH} characters, the least SECRET_KEY takes`,
        });
      const first = keys.indexOf(key);
      if (first < i)
        return helpers.message({ custom: `has the same key twice (entries ${first + 1} and ${i + 1})` });
    }
    return keys;
  });

const schema = Joi.object({
  NODE_ENV: Joi.string().valid('development', 'production', 'test').default('development'),
  PORT: Joi.number().port().default(8000),
  METRICS_PORT: Joi.number()
    .port()
    .when('PORT', {
      // An ephemeral API port (0, as tests use) takes an ephemeral metrics port too, so parallel
      // processes never collide on the fixed default.
      is: 0,
      then: Joi.number().default(0),
      otherwise: Joi.number().invalid(Joi.ref('PORT')).default(9464),
    })
    .messages({ 'any.invalid': 'METRICS_PORT must differ from PORT' }),
  DB_HOSTNAME: Joi.string().hostname().empty(''),
  DB_PORT: Joi.number().port().default(5432),
  DB_USERNAME: Joi.string().default('postgres'),
  DB_PASSWORD: Joi.string().allow('').default(''),
  DB_NAME: Joi.string().default('postgres'),
  DB_SSL: Joi.boolean().truthy('1').falsy('0').default(false),
  DB_SSL_CA_FILE: Joi.string().empty(''),
  DB_POOL_MAX: Joi.number().integer().min(1).max(100).default(10),
  DB_STATEMENT_TIMEOUT_MS: Joi.number().integer().min(100).max(600_000).default(2000),
  DB_PREPARED_STATEMENTS: Joi.boolean().truthy('1').falsy('0').default(true),
  // A day at most: past that a migration wants a maintenance window, not a start-up.
  DB_MIGRATION_TIMEOUT_MS: Joi.number().integer().min(1000).max(86_400_000).default(600_000),
  DB_STARTUP_WAIT_SECONDS: Joi.number().integer().min(0).max(3600).default(60),
  DB_EMBEDDED_DIR: Joi.string().default('.data/pglite'),
  SECRET_KEY: Joi.string()
    .min(SECRET_KEY_MIN_LENGTH)
    .empty('')
    .when('NODE_ENV', { is: 'production', then: Joi.required() }),
  SECRET_KEYS_ACCEPTED: keyList.default(''),
  ACCESS_TOKEN_EXPIRE_MINUTES: Joi.number()
    .integer()
    .min(1)
    .max(60 * 24 * 30)
    .default(30),
  CORS_ALLOWED_ORIGINS: originList.default(''),
  BCRYPT_ROUNDS: Joi.number()
    .integer()
    .max(15)
    // Tests may lower the cost to keep suites fast; production never goes below 10.
    .when('NODE_ENV', { is: 'production', then: Joi.number().min(10), otherwise: Joi.number().min(4) })
    .default(12),
  LOG_LEVEL: Joi.string().valid('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent').default('info'),
  SHUTDOWN_DELAY_SECONDS: Joi.number().min(0).max(120).default(5),
  SHUTDOWN_TIMEOUT_SECONDS: Joi.number().min(1).max(600).default(15),
}).unknown(true);

interface RawSettings {
  NODE_ENV: Settings['nodeEnv'];
  PORT: number;
  METRICS_PORT: number;
  DB_HOSTNAME?: string;
  DB_PORT: number;
  DB_USERNAME: string;
  DB_PASSWORD: string;
  DB_NAME: string;
  DB_SSL: boolean;
  DB_SSL_CA_FILE?: string;
  DB_POOL_MAX: number;
  DB_STATEMENT_TIMEOUT_MS: number;
  DB_PREPARED_STATEMENTS: boolean;
  DB_MIGRATION_TIMEOUT_MS: number;
  DB_STARTUP_WAIT_SECONDS: number;
  DB_EMBEDDED_DIR: string;
  SECRET_KEY?: string;
  SECRET_KEYS_ACCEPTED: string[] | string;
  ACCESS_TOKEN_EXPIRE_MINUTES: number;
  CORS_ALLOWED_ORIGINS: string[] | string;
  BCRYPT_ROUNDS: number;
  LOG_LEVEL: Settings['logLevel'];
  SHUTDOWN_DELAY_SECONDS: number;
  SHUTDOWN_TIMEOUT_SECONDS: number;
}

/** The CA file, checked at start-up (the connection reads it again for each new connection). */
function checkedCaFile(raw: RawSettings): string | undefined {
  const file = raw.DB_SSL_CA_FILE;
  if (file === undefined) return undefined;
  if (!raw.DB_SSL) throw new SettingsError('Invalid setting DB_SSL_CA_FILE: it needs DB_SSL=true');
  let pem: string;
  try {
    pem = readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new SettingsError(`Invalid setting DB_SSL_CA_FILE: cannot read ${file} (${code})`);
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----'))
    throw new SettingsError(`Invalid setting DB_SSL_CA_FILE: ${file} holds no PEM certificate`);
  return file;
}

/** The accepted keys, checked against SECRET_KEY, which signs and so is accepted anyway. */
function checkedAcceptedKeys(raw: RawSettings): string[] {
  // The default '' skips the custom rule, so it arrives as a string.
  const keys = Array.isArray(raw.SECRET_KEYS_ACCEPTED) ? raw.SECRET_KEYS_ACCEPTED : [];
  const same = keys.indexOf(raw.SECRET_KEY ?? '');
  if (same >= 0)
    throw new SettingsError(
      `Invalid setting SECRET_KEYS_ACCEPTED: entry ${same + 1} of ${keys.length} is SECRET_KEY itself; list only the other keys`,
    );
  return keys;
}

/**
 * The id of an HMAC key, carried in the `kid` header of the tokens it signs and logged at start:
 * base64url of the first 8 bytes of the key's SHA-256. It names the key without revealing it (a
 * token signed with the key is as much an offline guessing oracle), and being derived from the key
 * it needs no setting of its own to keep in step.
 */
export function keyId(secretKey: string): string {
  return createHash('sha256').update(secretKey, 'utf8').digest().subarray(0, 8).toString('base64url');
}

/** Reads the settings from an environment; throws SettingsError naming the first bad one. */
export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const result = schema.validate(env, { abortEarly: true, errors: { wrap: { label: false } } });
  if (result.error) {
    const detail = result.error.details[0];
    const name = String(detail?.path[0] ?? 'settings');
    throw new SettingsError(`Invalid setting ${name}: ${result.error.message}`);
  }
  const raw = result.value as RawSettings;
  return {
    nodeEnv: raw.NODE_ENV,
    port: raw.PORT,
    metricsPort: raw.METRICS_PORT,
    db: {
      hostname: raw.DB_HOSTNAME,
      port: raw.DB_PORT,
      username: raw.DB_USERNAME,
      password: raw.DB_PASSWORD,
      name: raw.DB_NAME,
      ssl: raw.DB_SSL,
      sslCaFile: checkedCaFile(raw),
      poolMax: raw.DB_POOL_MAX,
      statementTimeoutMs: raw.DB_STATEMENT_TIMEOUT_MS,
      preparedStatements: raw.DB_PREPARED_STATEMENTS,
      migrationTimeoutMs: raw.DB_MIGRATION_TIMEOUT_MS,
      startupWaitSeconds: raw.DB_STARTUP_WAIT_SECONDS,
      embeddedDir: raw.DB_EMBEDDED_DIR,
    },
    secretKey: raw.SECRET_KEY ?? randomBytes(32).toString('base64url'),
    secretKeyGenerated: raw.SECRET_KEY === undefined,
    secretKeysAccepted: checkedAcceptedKeys(raw),
    accessTokenExpireMinutes: raw.ACCESS_TOKEN_EXPIRE_MINUTES,
    // The default '' skips the custom rule, so it arrives as a string.
    corsAllowedOrigins: Array.isArray(raw.CORS_ALLOWED_ORIGINS) ? raw.CORS_ALLOWED_ORIGINS : [],
    bcryptRounds: raw.BCRYPT_ROUNDS,
    logLevel: raw.LOG_LEVEL,
    shutdownDelaySeconds: raw.SHUTDOWN_DELAY_SECONDS,
    shutdownTimeoutSeconds: raw.SHUTDOWN_TIMEOUT_SECONDS,
  };
}

/** The settings as they may be logged: secrets left out. */
export function describeSettings(s: Settings): Record<string, unknown> {
  return {
    nodeEnv: s.nodeEnv,
    port: s.port,
    metricsPort: s.metricsPort,
    database: s.db.hostname
      ? {
          kind: 'postgres',
          host: s.db.hostname,
          port: s.db.port,
          name: s.db.name,
          user: s.db.username,
          ssl: s.db.ssl,
          // Which roots the server's certificate is checked against.
          sslCaFile: s.db.sslCaFile ?? 'none: the public roots',
          poolMax: s.db.poolMax,
          preparedStatements: s.db.preparedStatements,
        }
      : { kind: 'embedded', dir: s.db.embeddedDir },
    statementTimeoutMs: s.db.statementTimeoutMs,
    migrationTimeoutMs: s.db.migrationTimeoutMs,
    startupWaitSeconds: s.db.startupWaitSeconds,
    // Ids, never keys: which phase of a key rotation this process is in (README, "Rotating SECRET_KEY").
    tokenKeyIds: { signing: keyId(s.secretKey), accepted: s.secretKeysAccepted.map(keyId) },
    accessTokenExpireMinutes: s.accessTokenExpireMinutes,
    corsAllowedOrigins: s.corsAllowedOrigins,
    bcryptRounds: s.bcryptRounds,
    logLevel: s.logLevel,
    shutdownDelaySeconds: s.shutdownDelaySeconds,
    shutdownTimeoutSeconds: s.shutdownTimeoutSeconds,
  };
}
