import type { Knex } from 'knex';
import { lintMigrations } from '../../scripts/migration-sql';
import { usingPostgres } from './helpers';

/**
 * The migration lint (scripts/migration-sql.ts, `npm run migrations:lint`): squawk over the SQL a
 * real migrator run sends. It captures on PostgreSQL only (the scratch database and the
 * migrations' own connection), so on the embedded database these cases are skipped.
 */
const onPostgres = usingPostgres() ? describe : describe.skip;

interface Finding {
  file: string;
  rule_name: string;
}

/** squawk's findings (its JSON reporter), as the rules each file broke. */
function rulesByFile(output: string): Record<string, string[]> {
  const byFile: Record<string, string[]> = {};
  for (const finding of JSON.parse(output) as Finding[]) {
    (byFile[finding.file] ??= []).push(finding.rule_name);
  }
  return byFile;
}

const probe = (sql: string): Knex.Migration => ({
  up: async (knex) => {
    // A lock time-out as a careful migration sets it, so each probe breaks one rule alone.
    await knex.raw("SET LOCAL lock_timeout = '1s'");
    await knex.raw(sql);
  },
  down: () => Promise.resolve(),
});

/**
 * What squawk reports on the shipped migrations. 20261125000005 as released adds its column and
 * counts every post under an ACCESS EXCLUSIVE lock on posts with no lock time-out, so a long
 * transaction on posts queues every read behind it: the finding this lint exists for. Its online
 * rewrite (a lock time-out first, a nullable column, the count in the background) empties this.
 */
const SHIPPED_FINDINGS: Record<string, string[]> = {
  '20261125000005_post_vote_counts.sql': ['require-lock-timeout'],
};

onPostgres('Migration lint', () => {
  test('When migrations lock a live table badly, then squawk reports each one under its migration, and the shipped ones only as known', async () => {
    const result = await lintMigrations({
      reporter: 'json',
      extra: {
        '29990101000001_lint_probe_index': probe('CREATE INDEX posts_lint_probe ON posts (title)'),
        '29990101000002_lint_probe_column': probe('ALTER TABLE posts ADD COLUMN lint_probe bigint NOT NULL'),
      },
    });
    expect(result.status).not.toBe(0);
    // Everything runs inside the migration transaction: one squawk run, over every migration.
    expect(result.runs).toHaveLength(1);
    expect(result.files.outside).toEqual([]);
    expect(result.files.inTransaction).toEqual(
      expect.arrayContaining(['20261121000001_create_users.sql', '29990101000002_lint_probe_column.sql']),
    );
    expect(rulesByFile(result.runs[0]?.output ?? '')).toEqual({
      ...SHIPPED_FINDINGS,
      '29990101000001_lint_probe_index.sql': ['require-concurrent-index-creation'],
      '29990101000002_lint_probe_column.sql': ['adding-required-field'],
    });
  });

  test('When a migration sets no lock time-out, then squawk reports it: the migrator sets only the statement time-out', async () => {
    const result = await lintMigrations({
      reporter: 'json',
      extra: {
        '29990101000003_lint_probe_bare': {
          up: (knex) => knex.raw('ALTER TABLE votes ADD COLUMN lint_probe text'),
          down: () => Promise.resolve(),
        },
      },
    });
    expect(result.status).not.toBe(0);
    expect(rulesByFile(result.runs[0]?.output ?? '')['29990101000003_lint_probe_bare.sql']).toEqual([
      'require-lock-timeout',
    ]);
  });
});
