import { createServer } from 'node:net';
import type { Database } from './db/connection';
import { errorFields, isDatabaseUnavailable, operatorHint } from './db/errors';
import type { Settings } from './settings';

/**
 * Start-up failures said as one line that names the setting at fault and what to change: the
 * person reading it has just typed `npm start` or is looking at a pod's last log line.
 */

/** A failure before serving, whose message is the line to print. */
export class StartupError extends Error {
  override name = 'StartupError';
}

type PortSettings = Pick<Settings, 'port' | 'metricsPort'>;

/** Which setting a listening port came from, for a listen error that only says the number. */
function portSetting(settings: PortSettings, port: unknown): string {
  if (port === settings.metricsPort) return 'METRICS_PORT';
  return 'PORT';
}

/** The line for a listener that could not bind, naming PORT or METRICS_PORT. */
export function listenProblem(settings: PortSettings, error: unknown): string | undefined {
  const { code } = errorFields(error);
  const port = (error as { port?: unknown }).port;
  const name = portSetting(settings, port);
  const value = `${name}=${String(port)}`;
  if (code === 'EADDRINUSE')
    return `${value} is in use, perhaps by another instance of this service: stop it, or set ${name} to a free port`;
  if (code === 'EACCES')
    return `${value} needs privileges this process lacks (ports below 1024): set ${name} to 1024 or above`;
  return undefined;
}

function tryListen(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    // The same address the service binds (every interface), so what refuses it refuses this.
    probe.listen(port, () => {
      probe.close(() => {
        resolve();
      });
    });
  });
}

/**
 * Fails now, before the migrations, when PORT or METRICS_PORT cannot be bound: a second instance
 * should hear so at once, not after waiting for the database. Port 0 (any free one) always binds.
 */
export async function checkPorts(settings: PortSettings): Promise<void> {
  for (const port of [settings.port, settings.metricsPort]) {
    if (port === 0) continue;
    try {
      await tryListen(port);
    } catch (error) {
      const problem = listenProblem(settings, error);
      throw problem ? new StartupError(problem, { cause: error }) : error;
    }
  }
}

type DatabaseSettings = Pick<
  Settings['db'],
  'hostname' | 'port' | 'name' | 'username' | 'startupWaitSeconds'
>;

/**
 * The line for a database that refused or could not be reached at start-up, or undefined when the
 * failure came from a migration itself.
 */
export function databaseProblem(db: DatabaseSettings, error: unknown): string | undefined {
  const { code, message } = errorFields(error);
  const server = `the PostgreSQL server at DB_HOSTNAME=${db.hostname ?? ''} DB_PORT=${String(db.port)}`;
  // pg's words when the server asks for a password and none was given.
  if (/client password must be a (non-empty )?string/.test(message))
    return `DB_PASSWORD is not set, and ${server} asks for a password: set DB_PASSWORD (and DB_USERNAME)`;
  if (code === '28P01')
    return `${server} refused the password of DB_USERNAME=${db.username}: check DB_USERNAME and DB_PASSWORD`;
  if (code === '28000')
    return `${server} refused DB_USERNAME=${db.username} (${message}): check DB_USERNAME, or the server's pg_hba.conf`;
  if (code === '3D000')
    return `DB_NAME=${db.name} does not exist on ${server}: create it (createdb ${db.name}), or set DB_NAME to one that exists`;
  if (isDatabaseUnavailable(error) && code !== '57014') {
    const hint = operatorHint(error);
    const waited = `after retrying for DB_STARTUP_WAIT_SECONDS=${String(db.startupWaitSeconds)}`;
    return hint
      ? `${server} could not be used ${waited} (${message}): ${hint}`
      : `${server} could not be reached ${waited} (${message || String(code)}): check that it runs and that DB_HOSTNAME and DB_PORT name it, or raise DB_STARTUP_WAIT_SECONDS`;
  }
  return undefined;
}

const quoted = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** Where `name`, which pg_settings says came from `source`, is reset. */
function resetAt(name: string, source: string, settings: Pick<Settings['db'], 'name' | 'username'>): string {
  const role = quoted(settings.username);
  const database = quoted(settings.name);
  switch (source) {
    case 'user':
      return `ALTER ROLE ${role} RESET ${name}`;
    case 'database':
      return `ALTER DATABASE ${database} RESET ${name}`;
    case 'database user':
      return `ALTER ROLE ${role} IN DATABASE ${database} RESET ${name}`;
    case 'configuration file':
      return `ALTER SYSTEM RESET ${name}, or postgresql.conf, then reload`;
    case 'client':
      return 'the options this process connects with (PGOPTIONS)';
    default:
      return `where it is set (${source})`;
  }
}

interface ServerSetting {
  name: string;
  setting: string;
  source: string;
}

/** What each setting the service depends on must not be, and why: the rest of its line. */
const UNSAFE: Record<string, (value: string, all: Map<string, ServerSetting>) => string | undefined> = {
  // It silences the warning by which a commit kept on the primary alone is told apart (db/deadline.ts).
  client_min_messages: (value) =>
    value === 'error'
      ? "which hides the warning PostgreSQL sends when a commit's wait for a synchronous standby is cut short, so such a change would be acknowledged: set it to warning or below"
      : undefined,
  synchronous_commit: (value, all) => {
    if (value === 'off')
      return "which acknowledges a commit before the primary's disk has it, so a crash would lose an acknowledged change: set it to on (or remote_write, remote_apply)";
    // Where no standby is named, local is what on does; where one is, it skips the wait for it.
    if (value === 'local' && all.get('synchronous_standby_names')?.setting)
      return 'which acknowledges a commit before the synchronous standby the server names (synchronous_standby_names) has it, so a failover would lose an acknowledged change: set it to on (or remote_write, remote_apply)';
    return undefined;
  },
};

/**
 * The line for a server whose settings for the service's role and database would have it
 * acknowledge a change the database can lose: commits that wait for no standby (synchronous_commit),
 * or that hide the warning when their wait is cut short (client_min_messages). The line says where
 * the setting comes from and how to reset it there.
 */
export async function durabilityProblem(
  db: Database,
  settings: Pick<Settings['db'], 'name' | 'username'>,
): Promise<string | undefined> {
  const rows = await db
    .knex<ServerSetting>('pg_settings')
    .select('name', 'setting', 'source')
    .whereIn('name', [...Object.keys(UNSAFE), 'synchronous_standby_names']);
  const all = new Map(rows.map((row) => [row.name, row]));
  for (const [name, unsafe] of Object.entries(UNSAFE)) {
    const row = all.get(name);
    const why = row && unsafe(row.setting.toLowerCase(), all);
    if (row && why)
      return `${name} is ${row.setting} for DB_USERNAME=${settings.username} on DB_NAME=${settings.name}, ${why} (${resetAt(name, row.source, settings)})`;
  }
  return undefined;
}
