import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { createIndexConcurrently, dropIndexConcurrently } from '../../service/src/db/concurrent-index';
import {
  captureMigrationSql,
  lintMigrations,
  MIGRATION_EXCEPTIONS,
  runSquawk,
  writeSqlFiles,
} from '../../tools/migration-sql';
import { describeOnPostgres } from './helpers';

/**
 * The migration lint (tools/migration-sql.ts, `npm run migrations:lint`): squawk over the SQL a
 * real migrator run sends. The capture runs on PostgreSQL only (a scratch database on its server),
 * so on the embedded database only the case without a capture runs.
 */

interface Finding {
  file: string;
  rule_name: string;
}

/** Runs `work` in a new temporary folder, removed after it. */
async function withTempDir(work: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'migration-lint-test-'));
  try {
    await work(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** squawk's findings (its JSON reporter), as the rules each file broke. */
function rulesByFile(output: string): Record<string, string[]> {
  const byFile: Record<string, string[]> = {};
  for (const finding of JSON.parse(output) as Finding[]) {
    (byFile[finding.file] ??= []).push(finding.rule_name);
  }
  return byFile;
}

/**
 * A migration that sets a lock time-out as a careful one does, so each probe breaks one rule alone;
 * `retried` runs its statement in a nested transaction (a savepoint), as a migration that retries
 * after a lock time-out does, which must not lose track of the migration transaction around it.
 */
const probe = (sql: string, retried = false): Knex.Migration => ({
  up: async (knex) => {
    await knex.raw("SET LOCAL lock_timeout = '1s'");
    if (retried) await knex.transaction((trx) => trx.raw(sql));
    else await knex.raw(sql);
  },
  down: () => Promise.resolve(),
});

/**
 * What squawk reports on the shipped migrations: nothing. 20261125000005's first form added a
 * column to posts and counted every post under its ACCESS EXCLUSIVE lock, the finding this lint
 * exists for; its online form creates the table post_vote_counts and its triggers (under the
 * migrator's lock time-out) and leaves the counting to the background backfill, so none is left.
 */
const SHIPPED_FINDINGS: Record<string, string[]> = {};

describeOnPostgres('Migration lint', () => {
  test('When migrations lock a live table badly, then squawk reports each one under its migration, and the shipped ones only as known', async () => {
    const result = await lintMigrations({
      reporter: 'json',
      extra: {
        '29990101000001_lint_probe_index': probe('CREATE INDEX posts_lint_probe ON posts (title)', true),
        '29990101000002_lint_probe_column': probe('ALTER TABLE posts ADD COLUMN lint_probe bigint NOT NULL'),
      },
    });
    expect(result.status).not.toBe(0);
    // One squawk run over the migrations inside the migration transaction, one over the shipped
    // ones that build their index concurrently outside it, which report nothing.
    expect(result.runs).toHaveLength(2);
    expect(result.files.outside).toEqual([
      '20261128000008_email_folded_unique.outside-transaction.sql',
      '20261128000009_title_folded_trgm.outside-transaction.sql',
      '20261129000011_post_idempotency_key_unique.outside-transaction.sql',
    ]);
    expect(result.runs[1]).toMatchObject({ status: 0, files: result.files.outside });
    expect(rulesByFile(result.runs[1]?.output ?? '')).toEqual({});
    expect(result.files.inTransaction).toEqual(
      expect.arrayContaining(['20261121000001_create_users.sql', '29990101000002_lint_probe_column.sql']),
    );
    expect(rulesByFile(result.runs[0]?.output ?? '')).toEqual({
      ...SHIPPED_FINDINGS,
      '29990101000001_lint_probe_index.sql': ['require-concurrent-index-creation'],
      '29990101000002_lint_probe_column.sql': ['adding-required-field'],
    });
    // Each of the shipped exceptions still silences a finding.
    expect(result.stale).toEqual([]);
  });

  test("When a migration sets no lock time-out of its own, then the migrator's captured time-outs cover it, squawk reports both once they are left out, and an exception nothing needs fails the lint", async () => {
    const extra = {
      '29990101000003_lint_probe_bare': {
        up: (knex: Knex) => knex.raw('ALTER TABLE votes ADD COLUMN lint_probe text'),
        down: () => Promise.resolve(),
      },
    };
    const result = await lintMigrations({
      reporter: 'json',
      exceptions: {
        ...MIGRATION_EXCEPTIONS,
        '29990101000003_lint_probe_bare': [{ rule: 'ban-drop-column', why: 'it drops no column' }],
      },
      extra,
    });
    expect(result.status).not.toBe(0);
    expect(rulesByFile(result.runs[0]?.output ?? '')['29990101000003_lint_probe_bare.sql']).toBeUndefined();
    expect(result.stale).toEqual(['29990101000003_lint_probe_bare: ban-drop-column']);
    expect(result.report).toContain('no longer needs');

    // The same capture without the migrator's own statements: the ALTER has no time-out at all.
    const capture = await captureMigrationSql(extra);
    await withTempDir((dir) => {
      const files = writeSqlFiles({ ...capture, preamble: [], background: [] }, dir, MIGRATION_EXCEPTIONS);
      const bare = runSquawk(dir, files, { reporter: 'json' });
      expect(rulesByFile(bare.runs[0]?.output ?? '')['29990101000003_lint_probe_bare.sql']?.sort()).toEqual([
        'require-lock-timeout',
        'require-statement-timeout',
      ]);
    });
  });
});

describeOnPostgres('Migration lint of a migration outside the transaction', () => {
  test('When a migration builds an index CONCURRENTLY with `config = { transaction: false }`, then its statements go to a file of their own, with no session setting that could stay on a pooled server connection, and squawk accepts them', async () => {
    await withTempDir(async (out) => {
      const result = await lintMigrations({
        out,
        reporter: 'json',
        extra: {
          '29990101000006_lint_probe_concurrently': {
            config: { transaction: false },
            up: (knex: Knex) => createIndexConcurrently(knex, 'posts_lint_probe', 'posts (title)'),
            down: (knex: Knex) => dropIndexConcurrently(knex, 'posts_lint_probe'),
          },
        },
      });
      const file = '29990101000006_lint_probe_concurrently.outside-transaction.sql';
      expect(result.files.outside).toContain(file);
      expect(result.files.inTransaction).not.toContain('29990101000006_lint_probe_concurrently.sql');
      const sql = readFileSync(path.join(out, file), 'utf8');
      expect(sql).toMatch(/CREATE INDEX CONCURRENTLY IF NOT EXISTS "posts_lint_probe" ON posts \(title\);/);
      expect(sql).not.toMatch(/\bSET\b/i);
      expect(result.runs.map((run) => rulesByFile(run.output))).toEqual([{}, {}]);
      expect(result.status).toBe(0);
    });
  });
});

test('When statements run outside a transaction (a step of their own, a background batch), then squawk lints them without assuming one', async () => {
  await withTempDir((dir) => {
    const step = [
      "SET lock_timeout = '1s'",
      'SET statement_timeout = 60000',
      'CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_lint_probe ON posts (title)',
    ];
    const sent = (inTransaction: boolean) => step.map((sql) => ({ sql, bindings: [], inTransaction }));
    const files = writeSqlFiles(
      {
        preamble: [],
        migrations: [
          { name: '29990101000004_lint_probe_inside', statements: sent(true) },
          { name: '29990101000005_lint_probe_outside', statements: sent(false) },
        ],
        background: [
          { name: 'lint_probe', sql: 'UPDATE posts SET title = title WHERE id = $1', inTransaction: false },
        ],
      },
      dir,
    );
    expect(files).toEqual({
      inTransaction: ['29990101000004_lint_probe_inside.sql'],
      outside: ['29990101000005_lint_probe_outside.outside-transaction.sql', 'background_lint_probe.sql'],
    });
    const result = runSquawk(dir, files, { reporter: 'json' });
    // CONCURRENTLY cannot run in a transaction: squawk says so only where it assumes one.
    expect(result.runs.map((run) => rulesByFile(run.output))).toEqual([
      { '29990101000004_lint_probe_inside.sql': ['ban-concurrent-index-creation-in-transaction'] },
      {},
    ]);
    expect(result.status).not.toBe(0);
  });
});
