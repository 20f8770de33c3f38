/**
 * A rolling upgrade from the previous release must be invisible to clients: no 5xx, no answer
 * slower than the statement budget, every acknowledged write kept, the vote counts right once the
 * new release has finished backfilling them, and the surge replica ready within 30 s. The
 * database is smaller than production's (tools/bench/upgrade.ts runs the same at 1,000,000 posts) but
 * large enough that a migration holding a lock for its whole length shows.
 */
import { serviceEnv } from '../../tools/harness/env';
import { report, stopAllServices } from './support';
import {
  ANSWER_BUDGET_MS,
  READY_BUDGET_MS,
  runOldOnNewSchema,
  runUpgrade,
  summary,
} from '../../tools/harness/upgrade-drill';

const POSTS = Number(process.env.UPGRADE_POSTS ?? 200_000);
const RATE = Number(process.env.UPGRADE_RATE ?? 90);

const log = (line: string) =>
  process.stderr.write(`[upgrade ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

const env = (database: string) =>
  serviceEnv(
    { PORT: '0', LOG_LEVEL: 'info', DB_NAME: database, DB_STATEMENT_TIMEOUT_MS: '2000' },
    'postgres',
  );

describe('a rolling upgrade from the previous release', () => {
  afterAll(() => stopAllServices());

  it('is invisible to clients and leaves every write and every count right', async () => {
    const result = await runUpgrade({
      posts: POSTS,
      votes: POSTS,
      env,
      passwordRounds: 4,
      perSecond: RATE,
      log,
    });
    report('upgrade', summary(result));
    const { figures, findings } = result;

    report('upgrade findings', {
      lostPosts: findings.lostPosts.length,
      lostVotes: findings.lostVotes.length,
      undeadVotes: findings.undeadVotes.length,
      apiMismatches: `${String(findings.apiMismatches.length)}/${String(findings.apiChecked)}`,
      columnMismatches: findings.columnMismatches.length,
    });
    // The yardstick: before anything is upgraded, the previous release alone carries the traffic.
    // If it does not, this host is too busy to tell what the upgrade costs.
    const baseline = {
      failed: figures.failedByPhase['old alone'],
      slowestMs: figures.slowestByPhase['old alone'] ?? 0,
    };
    if (baseline.failed > 0 || baseline.slowestMs > ANSWER_BUDGET_MS)
      throw new Error(
        `the previous release alone already missed the budget at ${String(RATE)} requests/s (${JSON.stringify(baseline)}): the host is too busy to judge the upgrade`,
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
      served: ['new', `old ${result.release.version}`],
      oldExit: 0,
      backfillFinished: true,
      lostPosts: [],
      lostVotes: [],
      undeadVotes: [],
      apiMismatches: [],
      columnMismatches: [],
    });
    expect(findings.apiChecked).toBeGreaterThan(1000);
  }, 600_000);

  it('leaves the previous release serving right on the migrated schema', async () => {
    const result = await runOldOnNewSchema({ posts: 2000, env, passwordRounds: 4, log });
    report('old release on the new schema', {
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
