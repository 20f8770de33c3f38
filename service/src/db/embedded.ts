import {
  closeSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import type { Extension, PGlite, QueryOptions, Results } from '@electric-sql/pglite';
import type knex from 'knex';

interface EmbeddedModules {
  PGlite: typeof PGlite;
  pg_trgm: Extension;
  ClientPgLite: typeof knex.Client;
}

/**
 * The embedded database's packages are optional dependencies, loaded only when DB_HOSTNAME is
 * unset: the production image leaves them out because the chart always names a
 * PostgreSQL server, and there the read-only root filesystem would refuse PGlite's files anyway.
 */
function loadEmbedded(): EmbeddedModules {
  try {
    /* eslint-disable @typescript-eslint/no-require-imports -- loaded on demand, see above; the
       package's contrib typings are ESM-only although a CommonJS build ships beside them */
    const { PGlite: pglite } = require('@electric-sql/pglite') as { PGlite: typeof PGlite };
    const { pg_trgm } = require('@electric-sql/pglite/contrib/pg_trgm') as { pg_trgm: Extension };
    const ClientPgLite = require('knex-pglite') as typeof knex.Client;
    /* eslint-enable @typescript-eslint/no-require-imports */
    return { PGlite: pglite, pg_trgm, ClientPgLite };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw error;
    throw new Error(
      'DB_HOSTNAME is not set, so the embedded database was chosen, but its packages ' +
        '(@electric-sql/pglite, knex-pglite) are not installed: this install left out optional ' +
        'dependencies, as the production image does. Set DB_HOSTNAME (and the other DB_* settings) ' +
        'to a PostgreSQL server, or install with optional dependencies.',
      { cause: error },
    );
  }
}

/** Another process (or another open in this one) holds the embedded database's folder. */
export class EmbeddedInUseError extends Error {
  override name = 'EmbeddedInUseError';
}

/** Folders this process holds: a second open here would write over the first as another process's would. */
const held = new Set<string>();

/** Whether `pid` names a live process other than this one (kill 0 only asks). */
function alive(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Waits `ms` on this thread: the lock is taken once, at start-up, before anything else runs. */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The process id a lock file names, or undefined when it is gone or holds none. */
function holderOf(file: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(file, 'utf8'), 10);
    return Number.isSafeInteger(pid) ? pid : undefined;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/**
 * Removes `file` if it still names `pid` (a process that is gone), under `<file>.takeover`: two
 * starts that both found the same leftover must not each remove what the other has just taken.
 */
function takeOver(file: string, pid: number | undefined): void {
  const mutex = `${file}.takeover`;
  try {
    closeSync(openSync(mutex, 'wx'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    // Held only between a read and an unlink: an old one was left by a crash there.
    if (Date.now() - statSync(mutex).mtimeMs > 1000) rmSync(mutex, { force: true });
    return;
  }
  try {
    if (holderOf(file) === pid) rmSync(file, { force: true });
  } finally {
    rmSync(mutex, { force: true });
  }
}

/**
 * Takes `social-posts.lock` in the folder, holding this process's id, and returns what gives it
 * back. PGlite locks nothing, and two processes on one folder each commit over the other's pages,
 * so the second opener is refused as PostgreSQL refuses a second postmaster; a file left by a
 * process that is gone (killed, or a container's earlier life under the same id) is taken over.
 */
function lockFolder(dir: string): () => void {
  // The real path: a symlink or a relative spelling of the folder names the same lock.
  const folder = realpathSync(dir);
  const file = path.join(folder, 'social-posts.lock');
  const inUse = (holder: string) =>
    new EmbeddedInUseError(
      `DB_EMBEDDED_DIR=${dir} is in use by ${holder} (another npm start, npm run dev or npm run migrate on the same folder): ` +
        `stop it, or set DB_EMBEDDED_DIR to another folder (if it is none of these, a process that reused the id of one gone, remove ${file})`,
    );
  if (held.has(folder)) throw inUse('this process');
  // Written whole first and linked into place: the lock never exists without its holder's id.
  const mine = `${file}.${String(process.pid)}`;
  writeFileSync(mine, `${String(process.pid)}\n`);
  try {
    for (let attempt = 0; attempt < 50; attempt += 1) {
      try {
        linkSync(mine, file);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        const pid = holderOf(file);
        if (pid !== undefined && alive(pid)) throw inUse(`process ${String(pid)}`);
        takeOver(file, pid);
        pause(10);
        continue;
      }
      held.add(folder);
      const release = () => {
        if (!held.delete(folder)) return;
        process.removeListener('exit', release);
        if (holderOf(file) === process.pid) rmSync(file, { force: true });
      };
      // An exit without close (a fatal start-up line, a test process ending) leaves no file behind.
      process.once('exit', release);
      return release;
    }
  } finally {
    rmSync(mine, { force: true });
  }
  throw inUse(`a process that keeps replacing ${file}`);
}

/** PGlite's error when it could not write its WAL (a full disk). */
const WAL_WRITE_FAILED =
  /^could not (?:write|extend|fsync|create)[^"]* "pg_wal\/|^could not write to log file /;

/**
 * A line of PGlite's log at a warning or worse, with its severity and message, read right after
 * the line's prefix (time and process), where no client's text can be: PostgreSQL indents each
 * further line of an entry with a tab.
 */
const SEVERE_LINE =
  /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[\d+\] (WARNING|ERROR|FATAL|PANIC): {2}(.*)$/;

/** Every statement after the embedded database failed, which is never sent to it. */
class EmbeddedFailure extends Error {
  override name = 'EmbeddedFailure';
}

/** The embedded database's state: a PANIC's message once one is logged, the failure once it is seen. */
interface EmbeddedState {
  panic?: string;
  failure?: EmbeddedFailure;
}

/** The one line that says why the process stops after the embedded database failed. */
function failureMessage(cause: string): string {
  return WAL_WRITE_FAILED.test(cause)
    ? `the embedded database could not write its WAL (${cause}): it answers nothing after that, so the process stops; free space in DB_EMBEDDED_DIR and start again (every write answered 2xx is in the folder)`
    : `the embedded database failed (${cause}): it answers nothing after that, so the process stops; start again (every write answered 2xx is in the folder)`;
}

/**
 * PGlite whose statements stop at its first PANIC or failed write of its WAL: after one, PGlite
 * spins on the next statement for ever, holding this thread, so no request, probe or signal is
 * served again. The failed statement itself rolled back, and every earlier commit is in the WAL.
 */
function guardedPGlite(
  Base: typeof PGlite,
  state: EmbeddedState,
  onFailed: (error: Error) => void,
): typeof PGlite {
  const fail = (cause: string, error?: unknown) => {
    if (state.failure) return;
    state.failure = new EmbeddedFailure(failureMessage(cause), { cause: error });
    onFailed(state.failure);
  };
  class Guarded extends Base {
    override async query<T>(query: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>> {
      if (state.failure) throw state.failure;
      try {
        return await super.query<T>(query, params, options);
      } catch (error) {
        if (error instanceof Error && WAL_WRITE_FAILED.test(error.message)) fail(error.message, error);
        throw error;
      } finally {
        if (state.panic !== undefined) fail(state.panic);
      }
    }
  }
  return Guarded;
}

/**
 * A PGlite database in `dir` (or in memory for `memory://`), ready, the knex client for it, and
 * `close`, which closes it and gives back the folder's lock. `onFailed` hears of a PANIC or a
 * failed write of the WAL once its statement returns, after which every statement is refused.
 * `onStuck` hears of a PANIC whose statement will never return: PGlite goes on in the aborted
 * transaction, looping in this thread, so `onStuck` must end the process itself.
 */
export async function openPGlite(
  dir: string,
  statementTimeoutMs: number,
  onFailed: (error: Error) => void,
  onStuck: (error: Error) => never,
): Promise<{
  pglite: PGlite;
  ClientPgLite: typeof knex.Client;
  close: () => Promise<void>;
  failed: () => boolean;
}> {
  const { PGlite: EmbeddedPGlite, pg_trgm, ClientPgLite } = loadEmbedded();
  let release = (): void => undefined;
  if (dir !== 'memory://') {
    mkdirSync(dir, { recursive: true });
    release = lockFolder(dir);
  }
  const state: EmbeddedState = {};
  // A PANIC counts from the line that logs it, before its statement returns (if it ever does).
  const failed = () => state.failure !== undefined || state.panic !== undefined;
  const pglite = new (guardedPGlite(EmbeddedPGlite, state, onFailed))(dir, {
    extensions: { pg_trgm },
    // A PANIC (a failed commit: its WAL write is in a critical section) is known only from this
    // log; a warning or error after it, before the statement returns, is PGlite looping on.
    onStderr: (line) => {
      const severe = SEVERE_LINE.exec(line);
      if (!severe) return false;
      if (state.panic !== undefined) onStuck(new EmbeddedFailure(failureMessage(state.panic)));
      if (severe[1] === 'PANIC') state.panic = severe[2];
      return false;
    },
  });
  const close = async () => {
    try {
      // After a failure PGlite is asked nothing more, a close (which writes a checkpoint) included.
      if (!pglite.closed && !failed()) await pglite.close();
    } finally {
      release();
    }
  };
  try {
    await pglite.waitReady;
    // PGlite does not enforce it (it runs in this thread and cancels nothing); it is set all the same
    // so the one session carries the service's settings, which migrations read and set back.
    await pglite.exec(`SET statement_timeout = ${String(statementTimeoutMs)}`);
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
  return { pglite, ClientPgLite, close, failed };
}
