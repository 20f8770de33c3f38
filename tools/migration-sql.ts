/**
 * `npm run migrations:lint [-- --out <folder>] [-- --config <.squawk.toml>]`: squawk over the SQL the
 * real migrator sends to a scratch database (recorded from knex's `query` event), so what is linted is
 * what knex generated, not a copy. One file per migration: the migrator's own statements of the
 * transaction (in force for every migration of a batch), then the migration's; knex's bookkeeping
 * and transaction control are left out, as squawk is told the files run in a transaction. What is
 * sent outside a transaction (a migration with `transaction: false`, the backfills) is linted
 * without that assumption. Statements that depend on rows are not sent on an empty database, so
 * are not linted. Exits 1 when squawk reports anything or an exception is no longer needed; 2 when
 * the capture fails.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, stripVTControlCharacters } from 'node:util';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { migrations, type Migration } from '../migrations';
import { openDatabase, type Database } from '../service/src/db/connection';
import { startBackfills } from '../service/src/db/backfill';
import { migrateToLatest } from '../service/src/db/migrator';
import { createLogger } from '../service/src/logger';
import { loadSettings } from '../service/src/settings';
import { serviceEnv } from './harness/env';
import { createScratchDatabase } from './harness/postgres';

/** One statement as pg received it. */
export interface SentStatement {
  sql: string;
  bindings: readonly unknown[];
  /** Sent inside a transaction: its connection had sent BEGIN and no COMMIT or ROLLBACK since. */
  inTransaction: boolean;
}

/** SQL that runs against the production schema outside the migrations, linted the same way. */
export interface BackgroundStatement {
  /** Names its file: `background_<name>.sql`. */
  name: string;
  sql: string;
  /** Whether it runs inside a transaction its caller opens (else each statement on its own). */
  inTransaction: boolean;
}

/**
 * Rules switched off for one migration only (a `squawk-ignore-file` comment atop its file), each with
 * why: changing a released table's keys now would itself be the rewrite the rules guard against. An
 * exception squawk no longer needs fails the lint, so none outlives its reason.
 */
export type Exceptions = Readonly<Record<string, readonly { rule: string; why: string }[]>>;

export const MIGRATION_EXCEPTIONS: Exceptions = {
  '20261121000001_create_users': [
    {
      rule: 'prefer-bigint-over-int',
      why: 'users.id is a released serial key that posts and votes reference',
    },
    { rule: 'prefer-identity', why: "users.id is knex's increments (serial), released" },
  ],
  '20261121000002_create_posts': [
    { rule: 'prefer-bigint-over-int', why: 'posts.id and posts.user_id are released integer keys' },
    { rule: 'prefer-identity', why: "posts.id is knex's increments (serial), released" },
    { rule: 'prefer-text-field', why: "posts.title is a released varchar(300), the API's length limit" },
  ],
  '20261121000003_create_votes': [
    { rule: 'prefer-bigint-over-int', why: 'votes reference the released integer keys of users and posts' },
  ],
  '20261125000005_post_vote_counts': [
    {
      rule: 'prefer-bigint-over-int',
      why: "a post's vote count cannot exceed the number of users, whose ids are integer",
    },
  ],
};

export interface CapturedMigrations {
  /** The migrator's own statements, before the first migration, in the same transaction. */
  preamble: SentStatement[];
  /** Each migration that ran, in order, with what it sent. */
  migrations: { name: string; statements: SentStatement[] }[];
  /** What the migrations' background backfills sent, run over one row each needs. */
  background: BackgroundStatement[];
}

/**
 * Records what `knex` sends into `sent`, each statement marked as inside a transaction or not.
 * Followed from the statements themselves: knex drops a query's transaction id once a nested
 * transaction (a savepoint) on the same connection has ended, though the outer one goes on.
 */
function recordQueries(knex: Knex, record: (statement: SentStatement) => void): void {
  const inTransaction = new Map<string | undefined, boolean>();
  knex.on('query', (query: { sql: string; bindings?: unknown[]; __knexUid?: string }) => {
    const sql = query.sql.trim();
    if (/^(begin|start\s+transaction)\b/i.test(sql)) inTransaction.set(query.__knexUid, true);
    record({
      sql: query.sql,
      bindings: query.bindings ?? [],
      inTransaction: inTransaction.get(query.__knexUid) ?? false,
    });
    if (/^(commit|end|rollback)\b(?!\s+to\b)/i.test(sql)) inTransaction.set(query.__knexUid, false);
  });
}

/** knex's own machinery, not a migration's: its tables and the transaction it wraps them in. */
function isBookkeeping(statement: SentStatement): boolean {
  if (/^\s*(begin|commit|rollback|savepoint|release\s+savepoint)\b/i.test(statement.sql)) return true;
  const mentions = [statement.sql, ...statement.bindings.map(String)].join(' ');
  return /\bknex_migrations(_lock)?\b/.test(mentions);
}

/** Every statement sent on the migrations' connections, with the migration that sent it. */
interface MigrationRecording {
  /** The migration running at the moment, set by its wrapper; undefined between migrations. */
  running: string | undefined;
  sent: { migration: string | undefined; statement: SentStatement }[];
}

/** Replaces each of `all` in the migrations record with one that marks itself running in `recording`. */
function wrapMigrations(all: Record<string, Migration>, recording: MigrationRecording): void {
  // The migrator looks each migration up in this record when it runs it, so wrapping the entries
  // tells which migration a statement came from without touching the migrator.
  for (const [name, migration] of Object.entries(all)) {
    migrations[name] = {
      ...migration,
      up: async (knex: Knex) => {
        recording.running = name;
        try {
          await migration.up(knex);
        } finally {
          recording.running = undefined;
        }
      },
    };
  }
}

/** Makes each connection `db` opens for the migrations record what it sends into `recording`. */
function recordMigrationConnections(db: Database, recording: MigrationRecording): void {
  const { sent } = recording;
  const open = db.forMigrations.bind(db);
  db.forMigrations = (sessionTimeouts?: boolean) => {
    const connection = open(sessionTimeouts);
    recordQueries(connection.knex, (statement) => sent.push({ migration: recording.running, statement }));
    return connection;
  };
}

/** Runs the backfills over one seeded post, what they send recorded into `background`. */
async function captureBackfills(
  db: Database,
  logger: Logger,
  background: BackgroundStatement[],
): Promise<void> {
  // A post not counted yet, so each backfill's batch has a row to fill and sends all it sends.
  // An extra migration may make posts refuse such a row (the test's NOT NULL probe): then the
  // backfills are not captured, as that schema is not one they run on.
  const seeded = await db.knex
    .transaction(async (trx) => {
      const [user] = await trx('users')
        .insert({ email: 'lint@example.com', password: 'x' })
        .returning<{ id: number }[]>('id');
      await trx('posts').insert({ title: 't', content: 'c', user_id: user?.id });
      // As if posted before the vote counts: no count row, no backfill progress.
      await trx('post_vote_counts').delete();
      await trx('schema_backfills').delete();
    })
    .then(
      () => true,
      () => false,
    );
  if (seeded)
    recordQueries(db.knex, (statement) => {
      if (!isBookkeeping(statement))
        background.push({ ...statement, name: `backfills_${String(background.length + 1)}` });
    });
  if (seeded) await startBackfills(db, logger).done;
}

/** The recorded statements split into the migrator's preamble and each of `ran`'s own, in order. */
function byMigration(
  sent: MigrationRecording['sent'],
  ran: string[],
): Pick<CapturedMigrations, 'preamble' | 'migrations'> {
  const firstOwn = sent.findIndex((s) => s.migration !== undefined);
  const preamble = sent
    .slice(0, firstOwn === -1 ? sent.length : firstOwn)
    .map((s) => s.statement)
    .filter((s) => !isBookkeeping(s));
  const statements = new Map<string, SentStatement[]>();
  for (const { migration, statement } of sent) {
    if (migration === undefined) continue;
    statements.set(migration, [...(statements.get(migration) ?? []), statement]);
  }
  return {
    preamble,
    migrations: ran.map((name) => ({ name, statements: statements.get(name) ?? [] })),
  };
}

/**
 * Migrates a fresh scratch database with the real migrator and returns what each migration sent.
 * `extra` migrations run after the shipped ones (the test's deliberately bad ones).
 */
export async function captureMigrationSql(
  extra: Record<string, Migration> = {},
): Promise<CapturedMigrations> {
  const shipped = { ...migrations };
  const recording: MigrationRecording = { running: undefined, sent: [] };
  const background: BackgroundStatement[] = [];
  // The scratch database first: if it cannot be made, the shared record is left as shipped.
  const scratch = await createScratchDatabase('sp_migration_lint');
  wrapMigrations({ ...shipped, ...extra }, recording);
  try {
    const logger = createLogger('silent');
    const db = await openDatabase(loadSettings(serviceEnv({ DB_NAME: scratch.name }, 'postgres')), logger);
    recordMigrationConnections(db, recording);
    try {
      await migrateToLatest(db, logger);
      await captureBackfills(db, logger, background);
    } finally {
      await db.close();
    }
  } finally {
    for (const name of Object.keys(migrations)) Reflect.deleteProperty(migrations, name);
    Object.assign(migrations, shipped);
    await scratch.drop();
  }

  const ran = Object.keys({ ...shipped, ...extra }).sort();
  return { ...byMigration(recording.sent, ran), background };
}

/** A bound value as a comment shows it: one line, whatever its type. */
function shown(value: unknown): string {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Date) return value.toISOString();
  if (Buffer.isBuffer(value)) return `\\x${value.toString('hex')}`;
  return value === undefined ? 'undefined' : JSON.stringify(value);
}

/** A statement as a line of a .sql file, its bindings in a comment above it. */
function sqlText(statement: Pick<SentStatement, 'sql' | 'bindings'>): string {
  const body = statement.sql.trim().replace(/;+$/, '');
  const values = statement.bindings.map((value, i) => `$${i + 1} = ${shown(value)}`);
  // A trailing line comment would swallow the terminator.
  const lastLine = body.slice(body.lastIndexOf('\n') + 1);
  const end = lastLine.includes('--') ? '\n;' : ';';
  return `${values.length > 0 ? `-- ${values.join(', ')}\n` : ''}${body}${end}\n`;
}

export interface SqlFiles {
  /** Files whose statements run inside a transaction (relative to the folder). */
  inTransaction: string[];
  /** Files whose statements each run on their own. */
  outside: string[];
}

/**
 * What a migration sends outside a transaction has no session SET before it (migrator.ts,
 * runOutside): one would stay on a pooler's server connection, in other clients' sessions.
 */
const OUTSIDE_A_TRANSACTION = [
  {
    rule: 'require-lock-timeout',
    why: "direct to PostgreSQL its connection starts with the migration's lock_timeout; behind a pooler it has none, and a concurrent index build's lock holds up no request",
  },
  {
    rule: 'require-statement-timeout',
    why: "direct to PostgreSQL its connection starts with the migration's statement_timeout; behind a pooler the connection's client-side deadline bounds each statement",
  },
] as const;

/** Writes the capture, its background statements too, into `dir`: one file per migration and kind. */
export function writeSqlFiles(
  capture: CapturedMigrations,
  dir: string,
  exceptions: Exceptions = MIGRATION_EXCEPTIONS,
): SqlFiles {
  mkdirSync(dir, { recursive: true });
  const files: SqlFiles = { inTransaction: [], outside: [] };
  const write = (file: string, header: string, statements: Pick<SentStatement, 'sql' | 'bindings'>[]) => {
    writeFileSync(path.join(dir, file), [`-- ${header}\n`, ...statements.map(sqlText)].join('\n'));
  };
  for (const { name, statements } of capture.migrations) {
    const inside = statements.filter((s) => s.inTransaction);
    const outside = statements.filter((s) => !s.inTransaction);
    const own = exceptions[name] ?? [];
    const ignoring = (rules: readonly { rule: string; why: string }[]) =>
      rules.length === 0
        ? ''
        : `\n${rules.map((e) => `-- ${e.rule}: ${e.why}\n`).join('')}` +
          `-- squawk-ignore-file ${rules.map((e) => e.rule).join(', ')}`;
    const ignore = ignoring(own);
    if (inside.length > 0) {
      write(
        `${name}.sql`,
        `${name}: the migrator's statements in its transaction, then the migration's${ignore}`,
        [...capture.preamble, ...inside],
      );
      files.inTransaction.push(`${name}.sql`);
    }
    if (outside.length > 0) {
      write(
        `${name}.outside-transaction.sql`,
        `${name}: statements sent outside the transaction${ignoring([...own, ...OUTSIDE_A_TRANSACTION])}`,
        outside,
      );
      files.outside.push(`${name}.outside-transaction.sql`);
    }
  }
  for (const statement of capture.background) {
    const file = `background_${statement.name}.sql`;
    write(file, `background statement ${statement.name}`, [{ sql: statement.sql, bindings: [] }]);
    (statement.inTransaction ? files.inTransaction : files.outside).push(file);
  }
  return files;
}

/** The repository's squawk configuration. */
const DEFAULT_CONFIG = path.resolve(__dirname, '..', '.squawk.toml');

export interface SquawkRun {
  files: string[];
  /** squawk's exit status: 0 when it found nothing. */
  status: number;
  output: string;
}

export interface SquawkResult {
  /** 0 when squawk found nothing. */
  status: number;
  /** squawk's report (all its runs, one after the other). */
  report: string;
  /** One run for the files inside the migration transaction, one for those outside, if any. */
  runs: SquawkRun[];
}

/**
 * squawk's binary from its per-platform npm package (an optional dependency: the registry this
 * project installs from serves linux-x64's alone, so the `squawk-cli` launcher, which names all
 * five, cannot be locked). Elsewhere the lint says so rather than failing obscurely.
 */
function squawkBinary(): string {
  try {
    return path.join(path.dirname(require.resolve('@squawk-cli/linux-x64/package.json')), 'bin', 'squawk');
  } catch {
    throw new Error(
      `squawk's binary is not installed for ${process.platform}-${process.arch} (only @squawk-cli/linux-x64 is a dependency)`,
    );
  }
}

/** Runs squawk (its binary, offline) over the files in `dir`. */
export function runSquawk(
  dir: string,
  files: SqlFiles,
  options: { config?: string; reporter?: 'tty' | 'gcc' | 'json' } = {},
): SquawkResult {
  const squawk = squawkBinary();
  const runs: [string[], string][] = [
    [files.inTransaction, '--assume-in-transaction'],
    [files.outside, '--no-assume-in-transaction'],
  ];
  const done: SquawkRun[] = [];
  for (const [paths, transaction] of runs) {
    if (paths.length === 0) continue;
    const args = [`--config=${options.config ?? DEFAULT_CONFIG}`, transaction];
    if (options.reporter) args.push(`--reporter=${options.reporter}`);
    const result = spawnSync(squawk, [...args, ...paths], { cwd: dir, encoding: 'utf8' });
    if (result.error) throw result.error;
    done.push({ files: paths, status: result.status ?? 1, output: `${result.stdout}${result.stderr}` });
  }
  return {
    status: Math.max(0, ...done.map((run) => run.status)),
    report: done.map((run) => run.output).join('\n'),
    runs: done,
  };
}

/**
 * The exceptions squawk would not need: `<migration>: <rule>` for each whose rule it does not
 * report on that migration's statements when linted without any exception.
 */
function staleExceptions(
  capture: CapturedMigrations,
  exceptions: Exceptions,
  config: string = DEFAULT_CONFIG,
): string[] {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'migration-sql-bare-'));
  try {
    const files = writeSqlFiles({ ...capture, background: [] }, dir, {});
    const reported = new Set<string>();
    for (const run of runSquawk(dir, files, { config, reporter: 'json' }).runs) {
      for (const finding of JSON.parse(run.output) as { file: string; rule_name: string }[]) {
        reported.add(`${finding.file.replace(/(\.outside-transaction)?\.sql$/, '')}: ${finding.rule_name}`);
      }
    }
    return Object.entries(exceptions)
      .flatMap(([name, own]) => own.map((e) => `${name}: ${e.rule}`))
      .filter((exception) => !reported.has(exception));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Captures, writes into `out` (a temporary folder when not given) and lints. */
export async function lintMigrations(
  options: {
    out?: string;
    config?: string;
    reporter?: 'tty' | 'gcc' | 'json';
    extra?: Record<string, Migration>;
    exceptions?: Exceptions;
  } = {},
): Promise<SquawkResult & { files: SqlFiles; stale: string[] }> {
  const exceptions = options.exceptions ?? MIGRATION_EXCEPTIONS;
  const dir = options.out ?? mkdtempSync(path.join(os.tmpdir(), 'migration-sql-'));
  try {
    const capture = await captureMigrationSql(options.extra);
    // Only a test's extra migration may keep the backfills from running; otherwise silence here
    // would mean their statements went unlinted.
    if (!options.extra && capture.background.length === 0)
      throw new Error('the backfills sent no statement to lint: their seed row was refused');
    const files = writeSqlFiles(capture, dir, exceptions);
    const result = runSquawk(dir, files, options);
    const stale = staleExceptions(capture, exceptions, options.config);
    if (stale.length === 0) return { ...result, files, stale };
    return {
      ...result,
      status: Math.max(result.status, 1),
      report: `${result.report}\nMIGRATION_EXCEPTIONS that squawk no longer needs (remove them):\n${stale
        .map((e) => `  ${e}\n`)
        .join('')}`,
      files,
      stale,
    };
  } finally {
    if (!options.out) rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { out, config } = parseArgs({
    options: { out: { type: 'string' }, config: { type: 'string' } },
  }).values;
  const result = await lintMigrations({
    ...(out ? { out: path.resolve(out) } : {}),
    config: path.resolve(config ?? DEFAULT_CONFIG),
  });
  // squawk colours its report even into a pipe; CI logs want it plain.
  const report = process.stdout.isTTY ? result.report : stripVTControlCharacters(result.report);
  process.stdout.write(report.endsWith('\n') ? report : `${report}\n`);
  const count = result.files.inTransaction.length + result.files.outside.length;
  process.stderr.write(
    `${result.status === 0 ? 'migration lint passed' : 'migration lint FAILED'}: ${count} files` +
      `${out ? ` in ${out}` : ''}\n`,
  );
  process.exitCode = result.status === 0 ? 0 : 1;
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(
      `migration lint failed: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    process.exit(2);
  });
}
