import { mkdirSync } from 'node:fs';
import type { Extension, PGlite } from '@electric-sql/pglite';
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

/** A PGlite database in `dir` (or in memory for `memory://`), ready, and the knex client for it. */
export async function openPGlite(
  dir: string,
  statementTimeoutMs: number,
): Promise<{ pglite: PGlite; ClientPgLite: typeof knex.Client }> {
  const { PGlite: EmbeddedPGlite, pg_trgm, ClientPgLite } = loadEmbedded();
  if (dir !== 'memory://') mkdirSync(dir, { recursive: true });
  const pglite = new EmbeddedPGlite(dir, { extensions: { pg_trgm } });
  await pglite.waitReady;
  // PGlite does not enforce it (it runs in this thread and cancels nothing); it is set all the same
  // so the one session carries the service's settings, which migrations read and set back.
  await pglite.exec(`SET statement_timeout = ${String(statementTimeoutMs)}`);
  return { pglite, ClientPgLite };
}
