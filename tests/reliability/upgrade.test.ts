/**
 * A rolling upgrade must be invisible to clients: no 5xx, no answer over the statement budget, every
 * acknowledged write kept, the vote counts right once backfilled, the surge replica ready in time.
 * It runs from each release this one promises to upgrade in place from (`upgradeSources`), on
 * databases large enough that a migration holding a lock for its whole length shows.
 */
import { appliedMigrations } from '../../service/src/db/migrator';
import { account, call, login, vote } from '../../tools/harness/client';
import { serviceEnv } from '../../tools/harness/env';
import {
  migrationsAt,
  readReleases,
  treeMigrations,
  upgradeSources,
  type Release,
} from '../../tools/harness/releases';
import { ROOT, spawnScript } from '../../tools/harness/service';
import { connect, createDatabase, report, stopAllServices } from './support';
import {
  ANSWER_BUDGET_MS,
  READY_BUDGET_MS,
  buildRelease,
  runOldOnNewSchema,
  runUpgrade,
  startRelease,
  summary,
} from '../../tools/harness/upgrade-drill';

/** The migration whose rows the new release counts in a background backfill after it starts. */
const VOTE_COUNTS_MIGRATION = '20261125000005_post_vote_counts';

/** The upgrade from the previous release. */
const POSTS = Number(process.env.UPGRADE_POSTS ?? 200_000);
/**
 * The upgrades from older releases: smaller, so a backfill ends while the traffic still runs, yet
 * large enough that a whole-table lock would miss the budget.
 */
const SCHEMA_POSTS = Number(process.env.UPGRADE_SCHEMA_POSTS ?? 50_000);
const RATE = Number(process.env.UPGRADE_RATE ?? 90);

const log = (line: string) =>
  process.stderr.write(`[upgrade ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

const env = (database: string) =>
  serviceEnv(
    { PORT: '0', LOG_LEVEL: 'info', DB_NAME: database, DB_STATEMENT_TIMEOUT_MS: '2000' },
    'postgres',
  );

const sources = upgradeSources().map((source) => ({
  ...source,
  name: `${source.release.version} (${source.why}; migrates ${source.migrations.join(', ') || 'nothing'})`,
  posts: source.why === 'previous release' ? POSTS : SCHEMA_POSTS,
}));

afterAll(() => stopAllServices());

describe.each(sources)('a rolling upgrade from $name', (source) => {
  it('is invisible to clients and leaves every write and every count right', async () => {
    const result = await runUpgrade({
      release: source.release,
      posts: source.posts,
      votes: source.posts,
      env,
      passwordRounds: 4,
      perSecond: RATE,
      log,
    });
    report(`upgrade from ${source.release.version}`, summary(result));
    const { figures, findings } = result;

    report(`upgrade from ${source.release.version}: findings`, {
      lostPosts: findings.lostPosts.length,
      lostVotes: findings.lostVotes.length,
      undeadVotes: findings.undeadVotes.length,
      apiMismatches: `${String(findings.apiMismatches.length)}/${String(findings.apiChecked)}`,
      columnMismatches: findings.columnMismatches.length,
    });
    // The yardstick: before anything is upgraded, the old release alone carries the traffic.
    // If it does not, this host is too busy to tell what the upgrade costs.
    const baseline = {
      failed: figures.failedByPhase['old alone'],
      slowestMs: figures.slowestByPhase['old alone'] ?? 0,
    };
    if (baseline.failed > 0 || baseline.slowestMs > ANSWER_BUDGET_MS)
      throw new Error(
        `release ${source.release.version} alone already missed the budget at ${String(RATE)} requests/s (${JSON.stringify(baseline)}): the host is too busy to judge the upgrade`,
      );
    // One comparison, so a failure shows every broken promise at once.
    expect({
      outsideApi: figures.outsideApi.slice(0, 3),
      serverErrors: figures.serverErrors,
      noAnswer: figures.noAnswer,
      overBudget: figures.overBudget,
      readyWithinBudget: figures.newReadyMs <= READY_BUDGET_MS,
      // Both served (the upgrade really was rolling), and the old one drained and exited cleanly.
      served: Object.keys(figures.byInstance).sort(),
      oldExit: figures.oldExit,
      backfillFinished: figures.backfill.how !== 'not finished',
      lostPosts: findings.lostPosts,
      lostVotes: findings.lostVotes,
      undeadVotes: findings.undeadVotes,
      apiMismatches: findings.apiMismatches.slice(0, 5),
      columnMismatches: findings.columnMismatches.slice(0, 5),
    }).toEqual({
      outsideApi: [],
      serverErrors: 0,
      noAnswer: 0,
      overBudget: 0,
      readyWithinBudget: true,
      served: ['new', `old ${source.release.version}`],
      oldExit: 0,
      backfillFinished: true,
      lostPosts: [],
      lostVotes: [],
      undeadVotes: [],
      apiMismatches: [],
      columnMismatches: [],
    });
    expect(findings.apiChecked).toBeGreaterThan(1000);
    // An upgrade that crosses the vote counts' migration counted every seeded post in its
    // background backfill; other migrations bring no backfill.
    if (source.migrations.includes(VOTE_COUNTS_MIGRATION))
      expect(
        figures.backfill.how === 'logged' ? figures.backfill.rows : figures.backfill,
      ).toBeGreaterThanOrEqual(source.posts);
  }, 600_000);

  it('leaves the old release serving right on the migrated schema', async () => {
    const result = await runOldOnNewSchema({
      release: source.release,
      posts: 2000,
      env,
      passwordRounds: 4,
      log,
    });
    report(`release ${source.release.version} on the new schema`, {
      answered: result.answered,
      wrong: result.wrong.length,
      firstWrong: result.wrong[0] ?? '',
      mismatches: result.mismatches.length,
    });
    expect(result.wrong.slice(0, 5)).toEqual([]);
    expect(result.checked).toBe(20);
    expect(result.mismatches).toEqual([]);
  }, 300_000);
});

/** The oldest recorded release: the rollback that undoes the most of this tree's migrations. */
const oldest = readReleases()
  .filter((release) => release.commit !== null)
  .at(-1) as Release;

describe(`a rollback to ${oldest.version}, which does not know this release's migrations`, () => {
  it("starts after this release's migrate down --to its last migration, serves what this release wrote, and this release takes the database back", async () => {
    const theirs = migrationsAt(oldest.commit as string);
    const keep = theirs.at(-1) as string;
    expect(treeMigrations().filter((name) => !theirs.includes(name)).length).toBeGreaterThan(0);
    const dir = buildRelease(oldest);
    const database = await createDatabase('rollback');
    const k = connect(database.name);
    try {
      const current = await startRelease(ROOT, env(database.name), 300_000);
      const token = await account(current.svc.base, 'writer@rollback.example');
      const post = await call(current.svc.base, '/posts/', {
        token,
        json: { title: 'written by this release', content: 'kept' },
      });
      const postId = (post.body as { id: number }).id;
      expect((await vote(current.svc.base, token, postId, 1)).status).toBe(201);
      await current.svc.stop();

      // The command an operator runs, with the same settings as the service.
      const down = spawnScript('service/src/migrate.ts', env(database.name), {
        args: ['down', '--to', keep],
      });
      expect(await down.exited).toBe(0);
      const downLog = down.lines.map((line) => line.msg);
      expect(await appliedMigrations(k)).toEqual(theirs);
      expect(downLog).toContain('rolled back');

      const old = await startRelease(dir, env(database.name), 120_000);
      const oldToken = await login(old.svc.base, 'writer@rollback.example');
      const read = await call(old.svc.base, `/posts/${String(postId)}`, { token: oldToken });
      expect(read.status).toBe(200);
      expect(read.body).toMatchObject({ title: 'written by this release', votes: 1 });
      const later = await call(old.svc.base, '/posts/', {
        token: oldToken,
        json: { title: 'written after the rollback', content: 'kept' },
      });
      expect(later.status).toBe(201);
      const laterId = (later.body as { id: number }).id;
      expect((await vote(old.svc.base, oldToken, laterId, 1)).status).toBe(201);
      await old.svc.stop();

      const again = await startRelease(ROOT, env(database.name), 300_000);
      expect(await appliedMigrations(k)).toEqual(treeMigrations());
      for (const id of [postId, laterId])
        expect((await call(again.svc.base, `/posts/${String(id)}`, { token: oldToken })).body).toMatchObject({
          votes: 1,
        });
      await again.svc.stop();
      report(`rollback to ${oldest.version}`, {
        kept: keep,
        undone: treeMigrations().length - theirs.length,
      });
    } finally {
      await k.destroy();
      await database.drop();
    }
  }, 600_000);
});
