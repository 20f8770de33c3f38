/**
 * `npm run bench:upgrade -- [--from <version>] [--posts 1000000] [--votes 1000000] [--rate 90] [--both 8] [--alone 5]`
 *
 * The rolling upgrade of tests/reliability/upgrade.test.ts at production size: a recorded release
 * serves a database of `--posts` posts and about `--votes` votes under steady mixed traffic of
 * `--rate` requests/s, this release starts beside it and migrates, both serve `--both` s, the old
 * one is stopped, this one serves alone `--alone` s. Prints what clients saw (failed answers,
 * slowest answer), how long this release took to be ready, how long its vote-count backfill took,
 * and whether every write and count held; exits 1 when any of it missed its budget. `--from`
 * names the release to upgrade from (one CHANGELOG.md records with a commit); without it, each
 * release the suite upgrades from (releases.ts `upgradeSources`), one after the other.
 */
import { benchServiceEnv } from '../harness/seed';
import {
  ANSWER_BUDGET_MS,
  READY_BUDGET_MS,
  runUpgrade,
  summary,
  type UpgradeResult,
} from '../harness/upgrade-drill';
import { recordedRelease, upgradeSources, type Release } from '../harness/releases';
import { stopAll } from '../harness/service';
import { option, runMain } from './common';

const posts = Number(option('posts', '1000000'));
const votes = Number(option('votes', String(posts)));
const perSecond = Number(option('rate', '90'));
const bothMs = Number(option('both', '8')) * 1000;
const aloneMs = Number(option('alone', '5')) * 1000;
const from = option('from', '');

const log = (line: string) => {
  process.stdout.write(`[bench:upgrade] ${line}\n`);
};

/** The budgets an upgrade must keep, each with what was measured. */
function verdicts(result: UpgradeResult): [string, boolean, string][] {
  const { figures: f, findings: x } = result;
  return [
    [
      'no failed answer (5xx or none)',
      f.serverErrors + f.noAnswer === 0,
      String(f.serverErrors + f.noAnswer),
    ],
    ['no status outside the API', f.outsideApi.length === 0, String(f.outsideApi.length)],
    [
      `slowest answer ≤ ${String(ANSWER_BUDGET_MS)} ms`,
      (f.slowest?.ms ?? 0) <= ANSWER_BUDGET_MS,
      `${String(Math.round(f.slowest?.ms ?? 0))} ms (${String(f.overBudget)} over)`,
    ],
    [`ready ≤ ${String(READY_BUDGET_MS)} ms`, f.newReadyMs <= READY_BUDGET_MS, `${String(f.newReadyMs)} ms`],
    [
      'backfill finished',
      f.backfill.how !== 'not finished',
      f.backfill.how === 'logged'
        ? `${String(f.backfill.durationMs)} ms for ${String(f.backfill.rows)} rows, done ${String(f.backfill.afterReadyMs)} ms after ready`
        : f.backfill.how,
    ],
    ['acknowledged posts kept', x.lostPosts.length === 0, `${String(x.lostPosts.length)} lost`],
    [
      'acknowledged votes kept',
      x.lostVotes.length + x.undeadVotes.length === 0,
      `${String(x.lostVotes.length)} lost, ${String(x.undeadVotes.length)} withdrawn yet present`,
    ],
    [
      'counts through the API',
      x.apiMismatches.length === 0,
      `${String(x.apiMismatches.length)} of ${String(x.apiChecked)} wrong`,
    ],
    [
      'stored vote counts',
      x.columnMismatches.length === 0,
      `${String(x.columnMismatches.length)} rows wrong`,
    ],
  ];
}

/** One upgrade from `release`, printed; whether it kept every budget. */
async function upgradeFrom(release: Release): Promise<boolean> {
  const began = Date.now();
  const result = await runUpgrade({
    release,
    posts,
    votes,
    perSecond,
    bothMs,
    aloneMs,
    // The bench's production settings, with the info-level lines the upgrade is read from.
    env: (database) => ({
      ...process.env,
      ...benchServiceEnv(database),
      PORT: '0',
      LOG_LEVEL: 'info',
      DB_STATEMENT_TIMEOUT_MS: '2000',
    }),
    passwordRounds: 12,
    backfillWithinMs: 600_000,
    log,
  });
  const f = result.figures;
  log(
    `from ${result.release.version} (${String(result.release.commit)}): ${String(f.posts)} posts, ${String(f.votes)} votes, seeded in ${f.seedSeconds.toFixed(0)} s`,
  );
  log(
    `${String(f.requests)} requests at ${String(perSecond)}/s: ${JSON.stringify(f.statuses)}; by release ${JSON.stringify(f.byInstance)}`,
  );
  log(
    `failed by phase: ${JSON.stringify(f.failedByPhase)}; slowest by phase (ms): ${JSON.stringify(f.slowestByPhase)}`,
  );
  // The yardstick: what the old release alone gave before anything was upgraded.
  const baselineOk =
    f.failedByPhase['old alone'] === 0 && (f.slowestByPhase['old alone'] ?? 0) <= ANSWER_BUDGET_MS;
  log(
    baselineOk
      ? `${result.release.version} alone kept the budget: what follows is the upgrade`
      : `${result.release.version} alone already missed the budget: this host is too busy for this rate (--rate)`,
  );
  for (const [what, n] of Object.entries(f.failures)) log(`  ${String(n)} × ${what}`);
  for (const [what, n] of Object.entries(f.logged)) log(`  logged ${String(n)} × ${what}`);
  log(`this release: listening after ${String(f.newListeningMs)} ms, ready after ${String(f.newReadyMs)} ms`);
  let ok = true;
  for (const [what, held, measured] of verdicts(result)) {
    ok &&= held;
    log(`${held ? 'ok  ' : 'FAIL'} ${what}: ${measured}`);
  }
  process.stdout.write(`${JSON.stringify(summary(result))}\n`);
  log(`${((Date.now() - began) / 1000).toFixed(0)} s in all`);
  return ok;
}

async function main(): Promise<void> {
  if (process.argv.includes('--from') && (!from || from.startsWith('--')))
    throw new Error('--from needs a version, one CHANGELOG.md records with a commit');
  const releases = from ? [recordedRelease(from)] : upgradeSources().map((source) => source.release);
  let ok = true;
  for (const release of releases) {
    log(`upgrading from ${release.version}`);
    ok = (await upgradeFrom(release)) && ok;
  }
  process.exitCode = ok ? 0 : 1;
}

runMain(main, { after: stopAll, failCode: 2 });
