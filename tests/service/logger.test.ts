import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { logFormat } from '../../service/src/logger';
import { describeOnEmbedded } from './helpers';

const run = promisify(execFile);
const root = path.join(__dirname, '..', '..');
const tsx = path.join(root, 'node_modules', '.bin', 'tsx');

describe('the log format decision', () => {
  test.each([
    ['development', undefined, true, 'pretty'],
    ['test', undefined, true, 'pretty'],
    ['development', 'false', true, 'pretty'],
    ['development', '0', true, 'pretty'],
    ['development', undefined, false, 'json'],
    ['development', 'true', true, 'json'],
    ['development', '1', true, 'json'],
    ['production', undefined, true, 'json'],
    ['production', undefined, false, 'json'],
  ] as const)(
    'When NODE_ENV=%s, CI=%s and stdout is a TTY: %s, then the log is %s',
    (nodeEnv, ci, isTTY, format) => {
      expect(logFormat(nodeEnv, ci, isTTY)).toBe(format);
    },
  );
});

/**
 * The migration command logs through the same logger as the service; it runs to its end on an
 * in-memory database, under `script` (util-linux) for a pseudo-terminal when `tty` is set.
 */
async function migrationLog(env: Record<string, string>, tty: boolean): Promise<string> {
  // The parent's CI and DB_HOSTNAME are left out unless a case sets them.
  const inherited = Object.entries(process.env).filter(([name]) => name !== 'CI' && name !== 'DB_HOSTNAME');
  const childEnv = {
    ...Object.fromEntries(inherited),
    DB_EMBEDDED_DIR: 'memory://',
    LOG_LEVEL: 'info',
    ...env,
  };
  const command = `${tsx} service/src/migrate.ts latest`;
  const { stdout } = tty
    ? await run('script', ['-qec', command, '/dev/null'], { cwd: root, env: childEnv })
    : await run(tsx, ['service/src/migrate.ts', 'latest'], { cwd: root, env: childEnv });
  return stdout;
}

const jsonLines = (out: string) =>
  out
    .split(/\r?\n/)
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as { msg: string });

// Its processes open an in-memory database whatever the run: the PostgreSQL pass need not repeat it.
describeOnEmbedded('the log a person or a collector reads', () => {
  jest.setTimeout(60_000);

  test('When the service runs in development on a terminal, then its log is human-readable lines, not JSON', async () => {
    const out = await migrationLog({ NODE_ENV: 'development' }, true);
    expect(out).toMatch(/INFO.*migrations applied/);
    expect(out).not.toMatch(/^\{"level"/m);
  });

  test.each([
    ['under CI on a terminal', { NODE_ENV: 'development', CI: 'true' }, true],
    ['in production on a terminal', { NODE_ENV: 'production', SECRET_KEY: 'x'.repeat(40) }, true],
    ['in development with stdout piped', { NODE_ENV: 'development' }, false],
  ])('When the service runs %s, then every log line is one JSON object', async (_case, env, tty) => {
    const lines = jsonLines(await migrationLog(env, tty));
    expect(lines.map((line) => line.msg)).toContain('migrations applied');
  });
});
