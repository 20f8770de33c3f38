import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Joi from 'joi';
import { parseProxyEntry } from './http/proxies';

/** Raised for a bad setting; its message is the one line printed before the process exits. */
export class SettingsError extends Error {
  override name = 'SettingsError';
}

/** The environment once the rules have checked it and put in the defaults, by variable name. */
type Validated = Readonly<Record<string, unknown>>;

/** What docs/settings.md's table and .env.example say of a variable (tools/settings-docs.ts writes both). */
export interface SettingDocs {
  /** The heading of the group this variable starts in .env.example. */
  section?: string;
  /** Markdown, one line: docs/settings.md's Meaning column and the start of the .env.example comment. */
  summary: string;
  /** Further sentences for .env.example only: the why and the how that a table cell has no room for. */
  detail?: string;
  /** After the default, in brackets, when what it comes to depends on something else. */
  defaultNote?: string;
}

interface Variable<T> {
  env: string;
  /** Validation and default: the rule start-up applies, the docs read the default from. */
  rule: Joi.AnySchema<T>;
  docs: SettingDocs;
}

/**
 * One entry of the settings table: how its value in Settings is made from the validated
 * environment, and, unless it is derived from other entries, the variable it comes from.
 */
class Setting<V> {
  constructor(
    readonly read: (validated: Validated) => V,
    readonly variable?: { env: string; rule: Joi.Schema; docs: SettingDocs },
  ) {}
}

/** A setting read from one variable: as validated, or through `read` (which may look at the others). */
function variable<T>(spec: Variable<T>): Setting<T>;
function variable<T, V>(spec: Variable<T> & { read: (value: T, validated: Validated) => V }): Setting<V>;
function variable<T, V>(
  spec: Variable<T> & { read?: (value: T, validated: Validated) => V },
): Setting<T | V> {
  const { env, rule, docs, read } = spec;
  return new Setting(
    (validated) => {
      // The rule has checked it: its type is the rule's.
      const value = validated[env] as T;
      return read ? read(value, validated) : value;
    },
    { env, rule, docs },
  );
}

/** A setting no variable sets, worked out from the others. */
const derived = <V>(read: (validated: Validated) => V): Setting<V> => new Setting(read);

interface Group {
  readonly [key: string]: Setting<unknown> | Group;
}

const ORIGIN = /^https?:\/\/[^\s/?#*]+$/;

/** A comma-separated list of origins; unset or empty: none. */
const originList = Joi.string<string[]>()
  .empty('')
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
  })
  .default([]);

/** A comma-separated list of addresses and CIDRs; unset or empty: none. */
const addressList = Joi.string<string[]>()
  .empty('')
  .custom((value: string, helpers) => {
    const entries = value
      .split(',')
      .map((e) => e.trim())
      .filter((e) => e !== '');
    for (const entry of entries) {
      if (!parseProxyEntry(entry))
        return helpers.message({
          custom: `has "${entry}", which is not an IP address or CIDR like 10.0.0.0/8 or fd00::/8`,
        });
    }
    return entries;
  })
  .default([]);

/** What TOKEN_ISSUER may hold: it goes into every token, and a release name and namespace fit. */
const ISSUER = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$/;

/** SECRET_KEY's own rule, which each key of SECRET_KEYS_ACCEPTED meets too. */
const SECRET_KEY_MIN_LENGTH = 32;

/** A comma-separated list of keys; unset or empty: none. */
const keyList = Joi.string<string[]>()
  .empty('')
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
  })
  .default([]);

/** A boolean that also takes 1 and 0, as a Secret or a shell may write it. */
const flag = () => Joi.boolean().truthy('1').falsy('0');

/** The CA file, checked at start-up (the connection reads it again for each new connection). */
function checkedCaFile(file: string | undefined, validated: Validated): string | undefined {
  if (file === undefined) return undefined;
  if (validated.DB_SSL !== true)
    throw new SettingsError('Invalid setting DB_SSL_CA_FILE: it needs DB_SSL=true');
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

/** One standby endpoint of DB_READ_HOSTNAME; `port` undefined takes DB_READ_PORT. */
export interface ReadHost {
  host: string;
  port?: number;
}

const HOST_RULE = Joi.string().hostname();

/** A comma-separated list of `host` or `host:port`; unset or empty: none. */
const readHostList = Joi.string<ReadHost[]>()
  .empty('')
  .custom((value: string, helpers) => {
    const entries = value.split(',').map((e) => e.trim());
    const hosts: ReadHost[] = [];
    for (const [i, entry] of entries.entries()) {
      const at = `entry ${i + 1} of ${entries.length}`;
      if (entry === '') return helpers.message({ custom: `has an empty ${at}; remove the extra comma` });
      const match = /^([^:]+)(?::(\d{1,5}))?$/.exec(entry);
      const host = match?.[1];
      const port = match?.[2] === undefined ? undefined : Number(match[2]);
      if (!host || HOST_RULE.validate(host).error)
        return helpers.message({ custom: `has ${at} "${entry}", which is not a host or host:port` });
      if (port !== undefined && (port < 1 || port > 65_535))
        return helpers.message({ custom: `has ${at} "${entry}", whose port is not 1 to 65535` });
      if (hosts.some((h) => h.host === host && h.port === port))
        return helpers.message({ custom: `has "${entry}" twice` });
      hosts.push(port === undefined ? { host } : { host, port });
    }
    return hosts;
  })
  .default([]);

/** Standbys read from only beside a PostgreSQL primary: the embedded database has none. */
function checkedReadHosts(hosts: ReadHost[], validated: Validated): { host: string; port: number }[] {
  if (hosts.length > 0 && validated.DB_HOSTNAME === undefined)
    throw new SettingsError('Invalid setting DB_READ_HOSTNAME: it needs DB_HOSTNAME (a PostgreSQL primary)');
  const port = (validated.DB_READ_PORT as number | undefined) ?? (validated.DB_PORT as number);
  return hosts.map((h) => ({ host: h.host, port: h.port ?? port }));
}

/** The accepted keys, checked against SECRET_KEY, which signs and so is accepted anyway. */
function checkedAcceptedKeys(keys: string[], validated: Validated): string[] {
  const signing = validated.SECRET_KEY;
  const same = typeof signing === 'string' ? keys.indexOf(signing) : -1;
  if (same >= 0)
    throw new SettingsError(
      `Invalid setting SECRET_KEYS_ACCEPTED: entry ${same + 1} of ${keys.length} is SECRET_KEY itself; list only the other keys`,
    );
  return keys;
}

/** OpenTelemetry's sampler names (OTEL_TRACES_SAMPLER) that this service builds. */
const SAMPLERS = [
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
  'always_on',
  'always_off',
  'traceidratio',
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** The OTLP/HTTP encodings the exporter speaks; gRPC is left out (one exporter fewer to ship). */
const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;

/**
 * OTEL_RESOURCE_ATTRIBUTES as OpenTelemetry writes it: `key=value` pairs separated by commas,
 * values percent-encoded where they hold a comma, an equals sign or a space.
 */
const resourceAttributes = Joi.string<Record<string, string> | undefined>()
  .empty('')
  .custom((value: string, helpers) => {
    const attributes: Record<string, string> = {};
    for (const pair of value.split(',')) {
      if (pair.trim() === '') continue;
      const at = pair.indexOf('=');
      const key = at < 0 ? '' : pair.slice(0, at).trim();
      if (key === '') return helpers.message({ custom: `has "${pair.trim()}", which is not key=value` });
      try {
        attributes[key] = decodeURIComponent(pair.slice(at + 1).trim());
      } catch {
        return helpers.message({ custom: `has a value for ${key} that is not valid percent-encoding` });
      }
    }
    return attributes;
  });

const NODE_ENVS = ['development', 'production', 'test'] as const;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * Every setting the service reads, each written once: where it lands in Settings (the key, `db`
 * for the database's), the environment variable, its rule (validation and default) and its docs.
 * Settings, the start-up validation and the docs all come from here. The order is the order of
 * validation, which decides which of several bad settings is named.
 */
const table = {
  nodeEnv: variable({
    env: 'NODE_ENV',
    rule: Joi.string<(typeof NODE_ENVS)[number]>()
      .valid(...NODE_ENVS)
      .default('development'),
    docs: {
      section: 'Process',
      summary: '`production` requires `SECRET_KEY` and `BCRYPT_ROUNDS` ≥ 10',
    },
  }),
  port: variable({
    env: 'PORT',
    rule: Joi.number().port().default(8000),
    docs: { summary: 'Listening port of the API' },
  }),
  /** Port of the Prometheus metrics listener, kept apart from the API so no ingress can expose it. */
  metricsPort: variable({
    env: 'METRICS_PORT',
    rule: Joi.number()
      .port()
      .when('PORT', {
        // An ephemeral API port (0, as tests use) takes an ephemeral metrics port too, so parallel
        // processes never collide on the fixed default.
        is: 0,
        then: Joi.number().default(0),
        otherwise: Joi.number().invalid(Joi.ref('PORT')).default(9464),
      })
      .messages({ 'any.invalid': 'METRICS_PORT must differ from PORT' }),
    docs: {
      summary:
        'Port of the Prometheus metrics listener (`GET /metrics`), apart from the API so the public ingress never exposes it; must differ from `PORT`',
      defaultNote: '0, ephemeral, when `PORT` is 0',
    },
  }),
  db: {
    /** Undefined means the embedded PGlite database. */
    hostname: variable({
      env: 'DB_HOSTNAME',
      rule: Joi.string<string | undefined>().hostname().empty(''),
      docs: {
        section: 'Database',
        summary:
          'PostgreSQL host; unset (or empty) means the embedded PGlite database instead, an optional dependency: `npm ci` installs it, the production image leaves it out and then requires this',
      },
    }),
    port: variable({
      env: 'DB_PORT',
      rule: Joi.number().port().default(5432),
      docs: { summary: 'PostgreSQL port' },
    }),
    username: variable({
      env: 'DB_USERNAME',
      rule: Joi.string().default('postgres'),
      docs: { summary: 'PostgreSQL user' },
    }),
    password: variable({
      env: 'DB_PASSWORD',
      rule: Joi.string().allow('').default(''),
      docs: { summary: "PostgreSQL user's password; a secret: never commit a real one" },
    }),
    name: variable({
      env: 'DB_NAME',
      rule: Joi.string().default('postgres'),
      docs: { summary: 'PostgreSQL database' },
    }),
    ssl: variable({
      env: 'DB_SSL',
      rule: flag().default(false),
      docs: {
        summary:
          '`true`: connect to PostgreSQL over TLS, the certificate verified (its chain, and that it names `DB_HOSTNAME`)',
      },
    }),
    /** File of the CA(s) the server's certificate must chain to (DB_SSL_CA_FILE); unset: the public roots. */
    sslCaFile: variable({
      env: 'DB_SSL_CA_FILE',
      rule: Joi.string<string | undefined>().empty(''),
      read: checkedCaFile,
      docs: {
        summary:
          "PEM file of a private CA the server's certificate must chain to, then the only CA trusted (CloudNativePG: `ca.crt` of the `<cluster>-ca` Secret; the chart mounts it); read again when it changes, so a renewed CA needs no restart; needs `DB_SSL=true`",
        defaultNote: 'the public roots',
        detail: 'It is read again at most every 2 s, when new connections open.',
      },
    }),
    poolMax: variable({
      env: 'DB_POOL_MAX',
      rule: Joi.number().integer().min(1).max(100).default(10),
      docs: { summary: 'Most connections one process opens to PostgreSQL' },
    }),
    statementTimeoutMs: variable({
      env: 'DB_STATEMENT_TIMEOUT_MS',
      // Twice budget.ts's least for a statement: as much again for the wait and statements before it.
      rule: Joi.number().integer().min(200).max(600_000).default(2000),
      docs: {
        summary:
          "A statement running longer than this is cancelled on the server and the request answers 503; it is also a request's database budget: its waits for a pooled connection and its statements together get no longer (see [The data tier](operations.md#the-data-tier-poolers-failover-lost-nodes))",
        detail:
          "Only the time on the database counts against the budget, not the time between (reading the body, say); a request that gets no connection in time, or has no time left for its next statement, answers 503 with Retry-After. The cancel is a cancel request, which poolers pass on; a connection that does not answer it within 0.5 s more is dropped. 2000 + 500 stays below the proxy's 3 s upstream time-out, so the client gets a clear answer, not a gateway error. At least 200: a statement is sent only with 100 ms or more of the budget left, and this leaves as much again for the wait for a connection and the statements before it. On the embedded database no statement is cut short: PGlite runs in the service's thread and does not enforce statement_timeout, so a slow statement runs to its end, and until then the whole process, probes included, answers nothing; only the waits for its one connection are bounded.",
      },
    }),
    /** Named prepared statements for the hot queries; off for poolers that do not track them. */
    preparedStatements: variable({
      env: 'DB_PREPARED_STATEMENTS',
      rule: flag().default(true),
      docs: {
        summary:
          'Named prepared statements for the hot queries (parsed once per connection); `false` behind a transaction-mode pooler that does not track them: PgBouncer before 1.21, or one with `max_prepared_statements = 0` (the default of 1.21 to 1.23); PgBouncer ≥ 1.24 works with `true`',
      },
    }),
    /** The statement time-out of migrations, which may rightly run far longer than a request. */
    migrationTimeoutMs: variable({
      env: 'DB_MIGRATION_TIMEOUT_MS',
      // A day at most: past that a migration wants a maintenance window, not a start-up.
      rule: Joi.number().integer().min(1000).max(86_400_000).default(600_000),
      docs: {
        summary:
          'Statement time-out of migrations (at start-up and `npm run migrate`), apart from the request one',
        detail:
          'Migrations may rightly run far longer than a request: a large CREATE INDEX, a rewrite of a big table. Not enforced on the embedded database, which cuts no statement short (see DB_STATEMENT_TIMEOUT_MS).',
      },
    }),
    /** How long one migration statement waits for a table lock before the migration is tried again. */
    migrationLockTimeoutMs: variable({
      env: 'DB_MIGRATION_LOCK_TIMEOUT_MS',
      rule: Joi.number().integer().min(50).max(60_000).default(500),
      docs: {
        summary:
          'How long a migration statement waits for a lock on a table that requests use; past it the migration rolls back and is tried again after a pause, until DB_MIGRATION_TIMEOUT_MS has passed',
        detail:
          "Requests queue behind a lock that is waited for, so this is the most a migration adds to a request waiting on the same table (docs/migrations.md). A migration that runs outside a transaction (a concurrent index build, whose lock holds up no request) has it only on a connection to the server itself: behind a pooler it sets none, as a session setting there would stay in other clients' sessions.",
      },
    }),
    /** How long the start-up waits for an unreachable database before it gives up. */
    startupWaitSeconds: variable({
      env: 'DB_STARTUP_WAIT_SECONDS',
      rule: Joi.number().integer().min(0).max(3600).default(60),
      docs: {
        summary:
          'At start-up, how long to keep retrying an unreachable database (refused, not resolvable, a pooler or TLS refusing the connection) before exiting 1; 0 gives up at once',
      },
    }),
    embeddedDir: variable({
      env: 'DB_EMBEDDED_DIR',
      rule: Joi.string().default('.data/pglite'),
      docs: {
        summary:
          'Embedded database files, used only when `DB_HOSTNAME` is unset, by one process at a time (its `social-posts.lock` names it); `memory://` keeps nothing',
      },
    }),
    /**
     * Standbys that serve anonymous reads (db/standbys.ts): each entry a host, or host:port; empty
     * means none, and every statement goes to DB_HOSTNAME as before.
     */
    readHosts: variable({
      env: 'DB_READ_HOSTNAME',
      rule: readHostList,
      read: checkedReadHosts,
      docs: {
        section: 'Reads on standbys',
        summary:
          'Where anonymous reads of the public feed go: a read-only endpoint of the standbys (CloudNativePG: the `ro` Pooler or the `-ro` Service), or several, comma-separated, each `host` or `host:port`; unset (or empty): every statement goes to `DB_HOSTNAME`, as does everything with an `Authorization` header; needs `DB_HOSTNAME`',
        detail:
          'A standby that has not replayed what the primary had DB_READ_MAX_LAG_MS ago is skipped for that statement, which goes to another standby or the primary; readiness never asks a standby (docs/operations.md, "Reads on standbys").',
      },
    }),
    readPort: variable({
      env: 'DB_READ_PORT',
      rule: Joi.number<number | undefined>().port().empty(''),
      read: (port: number | undefined, validated: Validated) => port ?? (validated.DB_PORT as number),
      docs: { summary: 'Port of the `DB_READ_HOSTNAME` entries that name none', defaultNote: '`DB_PORT`' },
    }),
    readPoolMax: variable({
      env: 'DB_READ_POOL_MAX',
      rule: Joi.number<number | undefined>().integer().min(1).max(100).empty(''),
      read: (max: number | undefined, validated: Validated) => max ?? (validated.DB_POOL_MAX as number),
      docs: {
        summary: 'Most connections one process opens to each `DB_READ_HOSTNAME` entry',
        defaultNote: '`DB_POOL_MAX`',
      },
    }),
    readMaxLagMs: variable({
      env: 'DB_READ_MAX_LAG_MS',
      rule: Joi.number().integer().min(100).max(3_600_000).default(1000),
      docs: {
        summary:
          'How stale a read on a standby may be: a standby is read from only when it has replayed what the primary had written this long ago; otherwise the statement goes to another standby or the primary',
        detail:
          "The primary's WAL position is read every 100 ms; each statement on a standby compares the standby's replay position with it in the same round trip.",
      },
    }),
  },
  secretKey: variable({
    env: 'SECRET_KEY',
    rule: Joi.string<string | undefined>()
      .min(SECRET_KEY_MIN_LENGTH)
      .empty('')
      .when('NODE_ENV', { is: 'production', then: Joi.required() })
      .messages({
        'any.required':
          'SECRET_KEY is required when NODE_ENV=production (tokens must outlive the process): set one, e.g. `openssl rand -hex 32`',
      }),
    read: (key: string | undefined) => key ?? randomBytes(32).toString('base64url'),
    docs: {
      section: 'Tokens and passwords',
      summary: `HS256 signing secret, at least ${SECRET_KEY_MIN_LENGTH} characters; required in production`,
      defaultNote: 'a random key per process, with a warning, so tokens die with the process',
      detail: 'Generate one: `openssl rand -hex 32`.',
    },
  }),
  /** True when SECRET_KEY was not set and a random one was made for this process. */
  secretKeyGenerated: derived((validated) => validated.SECRET_KEY === undefined),
  /**
   * Further keys whose tokens are accepted but never signed with: during a rotation the next key
   * (before it signs) or the previous one (until its tokens have expired). Never SECRET_KEY itself.
   */
  secretKeysAccepted: variable({
    env: 'SECRET_KEYS_ACCEPTED',
    rule: keyList,
    read: checkedAcceptedKeys,
    docs: {
      summary: `Further keys, comma-separated, whose tokens are accepted but never signed with: during a rotation the next key (before it signs) or the previous one (until its tokens expire); each at least ${SECRET_KEY_MIN_LENGTH} characters, none equal to \`SECRET_KEY\`, no repeats, no commas inside a key; see [Rotating SECRET_KEY](#rotating-secret_key)`,
      detail:
        'Tokens name their key in the `kid` header (derived from the key; logged at start, the keys never are).',
    },
  }),
  accessTokenExpireMinutes: variable({
    env: 'ACCESS_TOKEN_EXPIRE_MINUTES',
    rule: Joi.number()
      .integer()
      .min(1)
      .max(60 * 24 * 30)
      .default(30),
    docs: {
      summary:
        'Lifetime of an access token, and the longest `exp - iat` a token may carry: lowering it refuses tokens already issued for longer',
    },
  }),
  /** The `iss` and `aud` of every token signed, and the only ones accepted (http/tokens.ts). */
  tokenIssuer: variable({
    env: 'TOKEN_ISSUER',
    rule: Joi.string()
      .empty('')
      .pattern(ISSUER)
      .messages({
        'string.pattern.base':
          'must be 1 to 200 letters, digits and . _ : / - starting with a letter or digit',
      })
      .default('social-posts'),
    docs: {
      summary:
        "The `iss` and `aud` claims of every token signed, and the only ones accepted: releases that share a signing key but not this value refuse each other's tokens (the chart sets it to the release and namespace); see [Token issuer](security.md#token-issuer)",
      detail:
        'Tokens without iss and aud (signed before this setting existed) are accepted for ACCESS_TOKEN_EXPIRE_MINUTES after a process starts, so a rolling upgrade signs nobody out; after that they are refused.',
    },
  }),
  /** Verified tokens kept for a look-up on their next use (http/token-cache.ts); 0 keeps none. */
  tokenCacheSize: variable({
    env: 'TOKEN_CACHE_SIZE',
    rule: Joi.number().integer().min(0).max(1_000_000).default(10_000),
    docs: {
      summary:
        'Most verified access tokens one process keeps, each until its `exp`, so that their next requests cost a look-up instead of a signature check; 0 checks every request in full. Only a token that passed the full check enters; when full, newer tokens are checked in full each time and none is pushed out',
      detail:
        'About half a kilobyte each. A token kept is still refused the second it expires, and its user is still looked up on every request, so a deleted user gets 401 whether or not its token is kept; the cache starts empty with each process, the only time the keys change.',
    },
  }),
  corsAllowedOrigins: variable({
    env: 'CORS_ALLOWED_ORIGINS',
    rule: originList,
    docs: {
      section: 'HTTP',
      summary:
        'Comma-separated origins (`scheme://host[:port]`) allowed to call the API from a browser; never `*`',
    },
  }),
  /** Peers whose X-Forwarded-For and X-Request-Id are believed (http/proxies.ts). */
  trustedProxies: variable({
    env: 'TRUSTED_PROXIES',
    rule: addressList,
    docs: {
      summary:
        "Comma-separated addresses and CIDRs of the proxies in front (the ingress controller's or gateway's pods): only from them is `X-Forwarded-For` read for the client address the request log shows, and `X-Request-Id` taken; anyone else's are ignored (the peer is the client, the id is generated)",
      defaultNote: 'none: every peer is a client',
    },
  }),
  bcryptRounds: variable({
    env: 'BCRYPT_ROUNDS',
    rule: Joi.number()
      .integer()
      .max(15)
      // Tests may lower the cost to keep suites fast; production never goes below 10.
      .when('NODE_ENV', { is: 'production', then: Joi.number().min(10), otherwise: Joi.number().min(4) })
      .default(12),
    docs: {
      section: 'Passwords',
      summary: 'bcrypt cost of password hashes: tests may use 4, production never below 10',
      detail:
        "A password hashed at another cost is hashed again at this one at its owner's next successful login; until then a wrong password for that account takes the old cost's time, which tells it apart from an unknown e-mail.",
    },
  }),
  /** How many password hashes or checks run at once; the rest wait (users.routes.ts). */
  passwordHashConcurrency: variable({
    env: 'PASSWORD_HASH_CONCURRENCY',
    rule: Joi.number().integer().min(1).max(64).default(2),
    docs: {
      summary:
        "Most bcrypt hashes (registration) and checks (login) one process runs at once; the others wait their turn. Keep it below libuv's threadpool (`UV_THREADPOOL_SIZE`, 4 by default), which request decompression also needs",
      detail:
        'bcrypt runs on the same four threads as zlib: without a bound, a handful of logins would make every gzip-bodied request wait behind them (docs/benchmarks.md, "Login and the threadpool").',
    },
  }),
  /** How many searches the title index cannot serve run at once; the rest are 503 at once (posts.routes.ts). */
  searchUnindexedConcurrency: variable({
    env: 'SEARCH_UNINDEXED_CONCURRENCY',
    rule: Joi.number().integer().min(1).max(64).default(2),
    docs: {
      section: 'Load',
      summary:
        'Most list searches without three letters or digits in a row (`a`, `zz`, `%%`), which no index serves, one process runs at once; another is 503 with `Retry-After: 1` at once, never queued',
      detail:
        'The database answers such a search by walking the newest-first order until it has a page (a common term: at once) or by reading the whole table (a rare one): docs/search.md.',
    },
  }),
  logLevel: variable({
    env: 'LOG_LEVEL',
    rule: Joi.string<(typeof LOG_LEVELS)[number]>()
      .valid(...LOG_LEVELS)
      .default('info'),
    docs: { section: 'Logs', summary: 'The least severe level written' },
  }),
  tracing: {
    /** Unset: no tracing at all, and none of OpenTelemetry's SDK is loaded. */
    endpoint: variable({
      env: 'OTEL_EXPORTER_OTLP_ENDPOINT',
      rule: Joi.string<string | undefined>()
        .uri({ scheme: ['http', 'https'] })
        .empty('')
        // Joi takes some that Node's URL, which the exporter parses, does not (a port out of range).
        .custom((value: string, helpers) =>
          URL.canParse(value)
            ? value
            : helpers.message({ custom: 'is not a URL Node can read: check its host and port' }),
        ),
      docs: {
        section: 'Tracing (OpenTelemetry)',
        summary:
          "Base URL of an OTLP/HTTP collector (`http://collector:4318`), spans going to its `/v1/traces`; tracing is on only with it: unset, OpenTelemetry's SDK is not even loaded (see [Tracing](operations.md#tracing))",
        detail:
          "OTEL_EXPORTER_OTLP_HEADERS is read by the exporter as OpenTelemetry documents it. An incoming W3C traceparent is the parent of the request's span.",
      },
    }),
    protocol: variable({
      env: 'OTEL_EXPORTER_OTLP_PROTOCOL',
      rule: Joi.string<(typeof OTLP_PROTOCOLS)[number]>()
        .valid(...OTLP_PROTOCOLS)
        .default('http/protobuf'),
      docs: { summary: 'Encoding of the exported spans; gRPC is not offered' },
    }),
    serviceName: variable({
      env: 'OTEL_SERVICE_NAME',
      rule: Joi.string().default('social-posts'),
      docs: { summary: '`service.name` of the spans; it wins over one in `OTEL_RESOURCE_ATTRIBUTES`' },
    }),
    resourceAttributes: variable({
      env: 'OTEL_RESOURCE_ATTRIBUTES',
      rule: resourceAttributes,
      read: (attributes: Record<string, string> | undefined) => attributes ?? {},
      docs: {
        summary:
          'Further resource attributes of the spans, `key=value` pairs separated by commas, values percent-encoded (the chart sets the release, namespace and pod)',
        defaultNote: 'none',
      },
    }),
    sampler: variable({
      env: 'OTEL_TRACES_SAMPLER',
      rule: Joi.string<SamplerName>()
        .valid(...SAMPLERS)
        .default('parentbased_always_on'),
      docs: {
        summary:
          "Which requests are traced; the `parentbased_` ones follow the caller's (the proxy's) sampled flag when a `traceparent` comes with the request",
      },
    }),
    samplerArg: variable({
      env: 'OTEL_TRACES_SAMPLER_ARG',
      rule: Joi.number().min(0).max(1).default(1),
      docs: {
        summary:
          'The share of traces kept by the `traceidratio` samplers, from 0 to 1 (0.1: one in ten); the others read none',
      },
    }),
    exportDelayMs: variable({
      env: 'OTEL_BSP_SCHEDULE_DELAY',
      rule: Joi.number().integer().min(1).max(600_000).default(5000),
      docs: {
        summary:
          'Milliseconds between two exports of the finished spans, fewer than a full batch (512 spans) waiting; a full batch goes at once',
      },
    }),
    exportTimeoutMs: variable({
      env: 'OTEL_EXPORTER_OTLP_TIMEOUT',
      rule: Joi.number().integer().min(1).max(60_000).default(10_000),
      docs: {
        summary:
          'Milliseconds the collector has to take one batch, and the most the shutdown waits for the last spans: past it they are lost and the shutdown goes on',
      },
    }),
  },
  shutdownDelaySeconds: variable({
    env: 'SHUTDOWN_DELAY_SECONDS',
    // Only a proxy needs the drain: outside production a restart (npm run dev's, a test's) would wait for nothing.
    rule: Joi.number()
      .min(0)
      .max(120)
      .when('NODE_ENV', {
        is: 'production',
        then: Joi.number().default(5),
        otherwise: Joi.number().default(0),
      }),
    docs: {
      section: 'Shutdown',
      summary:
        'After SIGTERM, readiness answers 503 and the listener keeps serving this long, so the proxy takes the pod out of rotation before connections are refused',
      defaultNote: '5 when `NODE_ENV=production`, as the chart sets it',
    },
  }),
  shutdownTimeoutSeconds: variable({
    env: 'SHUTDOWN_TIMEOUT_SECONDS',
    rule: Joi.number().min(1).max(600).default(15),
    docs: { summary: 'Then in-flight requests get at most this long to finish before sockets are closed' },
  }),
} satisfies Group;

/** The values of a table's entries, groups kept as nested objects. */
type ValuesOf<G> = { [K in keyof G]: G[K] extends Setting<infer V> ? V : ValuesOf<G[K]> };

/** Every setting the service reads, typed and validated once at start-up. */
export type Settings = ValuesOf<typeof table>;

const variables = (group: Group): { env: string; rule: Joi.Schema; docs: SettingDocs }[] =>
  Object.values(group).flatMap((entry) =>
    entry instanceof Setting ? (entry.variable ? [entry.variable] : []) : variables(entry),
  );

const schema = Joi.object(Object.fromEntries(variables(table).map(({ env, rule }) => [env, rule]))).unknown(
  true,
);

function valuesOf(group: Group, validated: Validated): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(group).map(([key, entry]) => [
      key,
      entry instanceof Setting ? entry.read(validated) : valuesOf(entry, validated),
    ]),
  );
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
  // Built entry by entry from the table that Settings is the type of.
  return valuesOf(table, result.value as Validated) as Settings;
}

/** A variable as the docs show it: its default is what an empty environment comes to. */
export interface DocumentedVariable {
  name: string;
  /** Undefined when unset is a meaning of its own (see the docs' defaultNote). */
  default: unknown;
  /** The values it takes, when the rule lists them. */
  values: unknown[] | undefined;
  docs: SettingDocs;
}

/** Every variable of the table, in its order, for tools/settings-docs.ts. */
export function documentedVariables(): DocumentedVariable[] {
  const defaults = (schema.validate({}).value ?? {}) as Validated;
  return variables(table).map(({ env, rule, docs }) => {
    const described = rule.describe() as { flags?: { only?: boolean }; allow?: unknown[] };
    return {
      name: env,
      default: defaults[env],
      values: described.flags?.only ? described.allow : undefined,
      docs,
    };
  });
}

/** A URL as it may be logged: a user and password written in it, which Node sends as Basic auth, left out. */
function withoutCredentials(url: string): string {
  const parsed = new URL(url);
  if (parsed.username === '' && parsed.password === '') return url;
  parsed.username = '';
  parsed.password = '';
  return parsed.toString();
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
          // Where anonymous reads go; none: all to the host above.
          readHosts: s.db.readHosts.map((h) => `${h.host}:${String(h.port)}`),
          readPoolMax: s.db.readPoolMax,
          readMaxLagMs: s.db.readMaxLagMs,
        }
      : { kind: 'embedded', dir: s.db.embeddedDir },
    statementTimeoutMs: s.db.statementTimeoutMs,
    migrationTimeoutMs: s.db.migrationTimeoutMs,
    migrationLockTimeoutMs: s.db.migrationLockTimeoutMs,
    startupWaitSeconds: s.db.startupWaitSeconds,
    // Ids, never keys: which phase of a key rotation this process is in (docs/settings.md, "Rotating SECRET_KEY").
    tokenKeyIds: { signing: keyId(s.secretKey), accepted: s.secretKeysAccepted.map(keyId) },
    accessTokenExpireMinutes: s.accessTokenExpireMinutes,
    tokenCacheSize: s.tokenCacheSize,
    tokenIssuer: s.tokenIssuer,
    corsAllowedOrigins: s.corsAllowedOrigins,
    trustedProxies: s.trustedProxies,
    bcryptRounds: s.bcryptRounds,
    passwordHashConcurrency: s.passwordHashConcurrency,
    searchUnindexedConcurrency: s.searchUnindexedConcurrency,
    logLevel: s.logLevel,
    shutdownDelaySeconds: s.shutdownDelaySeconds,
    shutdownTimeoutSeconds: s.shutdownTimeoutSeconds,
    tracing: s.tracing.endpoint
      ? {
          endpoint: withoutCredentials(s.tracing.endpoint),
          protocol: s.tracing.protocol,
          serviceName: s.tracing.serviceName,
          resourceAttributes: s.tracing.resourceAttributes,
          sampler: s.tracing.sampler,
          samplerArg: s.tracing.samplerArg,
          exportDelayMs: s.tracing.exportDelayMs,
          exportTimeoutMs: s.tracing.exportTimeoutMs,
        }
      : 'off',
  };
}
