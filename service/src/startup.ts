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

/** Where a setting pg_settings says came from `source` is reset. */
function resetAt(source: string, settings: Pick<Settings['db'], 'name' | 'username'>): string {
  const role = quoted(settings.username);
  const database = quoted(settings.name);
  switch (source) {
    case 'user':
      return `ALTER ROLE ${role} RESET client_min_messages`;
    case 'database':
      return `ALTER DATABASE ${database} RESET client_min_messages`;
    case 'database user':
      return `ALTER ROLE ${role} IN DATABASE ${database} RESET client_min_messages`;
    case 'configuration file':
      return 'ALTER SYSTEM RESET client_min_messages, or postgresql.conf, then reload';
    case 'client':
      return 'the options this process connects with (PGOPTIONS)';
    default:
      return `where it is set (${source})`;
  }
}

/**
 * The line for a server that would not send the service its warnings: client_min_messages at
 * `error` silences the one PostgreSQL sends when a cancel ends a commit's wait for the synchronous
 * standby, by which a change kept on the primary alone is told apart (db/deadline.ts), and such a
 * change would then be acknowledged. The line says where the setting comes from.
 */
export async function warningsProblem(
  db: Database,
  settings: Pick<Settings['db'], 'name' | 'username'>,
): Promise<string | undefined> {
  const [row] = await db
    .knex<{ setting: string; source: string }>('pg_settings')
    .select('setting', 'source')
    .where('name', 'client_min_messages');
  if (row?.setting.toLowerCase() !== 'error') return undefined;
  return `client_min_messages is error for DB_USERNAME=${settings.username} on DB_NAME=${settings.name}, which hides the warning PostgreSQL sends when a commit's wait for a synchronous standby is cut short, so such a change would be acknowledged: set it to warning or below (${resetAt(row.source, settings)})`;
}
