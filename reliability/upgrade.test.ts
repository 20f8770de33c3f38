/**
 * A rolling upgrade from the previous release must be invisible to clients: no 5xx, no answer
 * slower than the statement budget, every acknowledged write kept, the vote counts right once the
 * new release has finished backfilling them, and the surge replica ready within 30 s. The
 * database is smaller than production's (bench/upgrade.ts runs the same at 1,000,000 posts) but
 * large enough that a migration holding a lock for its whole length shows.
 */
import { serviceEnv } from '../testing/env';
import { report, stopAllServices } from './support';
import { ANSWER_BUDGET_MS, READY_BUDGET_MS, runOldOnNewSchema, runUpgrade, summary } from './upgrade';

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
      log: (line) => process.stderr.write(`[upgrade ${new Date().toISOString().slice(11, 19)}] ${line}\n`),
    });
    report('upgrade', summary(result));
    const { figures, findings } = result;

    expect(figures.outsideApi.slice(0, 5)).toEqual([]);
    expect({ serverErrors: figures.serverErrors, noAnswer: figures.noAnswer }).toEqual({
      serverErrors: 0,
      noAnswer: 0,
    });
    expect(figures.slowest?.ms ?? 0).toBeLessThanOrEqual(ANSWER_BUDGET_MS);
    expect(figures.newReadyMs).toBeLessThanOrEqual(READY_BUDGET_MS);
    // Both releases served: the upgrade really was rolling.
    expect(Object.keys(figures.byInstance).sort()).toEqual(['new', `old ${result.release.version}`]);
    expect(figures.oldExit).toBe(0);

    expect(figures.backfill.how).not.toBe('not finished');
    expect(findings.lostPosts).toEqual([]);
    expect(findings.lostVotes).toEqual([]);
    expect(findings.undeadVotes).toEqual([]);
    expect(findings.apiChecked).toBeGreaterThan(1000);
    expect(findings.apiMismatches.slice(0, 5)).toEqual([]);
    expect(findings.columnMismatches.slice(0, 5)).toEqual([]);
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
