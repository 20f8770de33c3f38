/**
 * The service's environment in every suite that runs it (tests/service, tests/reliability/,
 * tests/browser/): one test signing key, cheap password hashing, and the database each suite asks
 * for. A suite adds only what its cases are about.
 */
import { connectionEnv } from './postgres';

/** The one signing key of every test run; tests that forge or check tokens sign with it too. */
export const TEST_SECRET = 'test-signing-secret-that-is-long-enough-0123456789';

/**
 * Where the service keeps its data: `configured` follows the DB_* variables of this process (the
 * embedded in-memory database when DB_HOSTNAME is unset), `embedded` always the in-memory one,
 * `postgres` always the suites' PostgreSQL server (tools/harness/postgres.ts).
 */
export type TestDatabase = 'configured' | 'embedded' | 'postgres';

export function serviceEnv(
  settings: Record<string, string> = {},
  database: TestDatabase = 'configured',
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'test',
    // The cost of production hashing has cases of its own; everywhere else it only slows the suite.
    BCRYPT_ROUNDS: '4',
    SECRET_KEY: TEST_SECRET,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'silent',
    DB_EMBEDDED_DIR: 'memory://',
  };
  if (database === 'embedded') delete env.DB_HOSTNAME;
  if (database === 'postgres') Object.assign(env, connectionEnv());
  return { ...env, ...settings };
}
