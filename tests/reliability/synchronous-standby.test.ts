import { account, call } from '../../tools/harness/client';
import { pollUntil } from '../../tools/harness/poll';
import { detailOf } from '../../tools/harness/problem';
import { startUnderTraffic } from '../../tools/harness/traffic';
import {
  expectAllStored,
  expectWithinBudget,
  replicatedBehindRelay,
  report,
  sleep,
  statusCounts,
  storedOn,
} from './support';

/**
 * The synchronous standby lost under write load, then the primary: every commit waits for the
 * standby, the statement deadline cancels that wait, and PostgreSQL then keeps the commit on the
 * primary alone, answering success with a warning. Such a write must not be acknowledged, or the
 * failover that follows loses it; nor may one whose backend is terminated in that wait be answered
 * "try again", as its commit stands on the primary.
 */
const STATEMENT_TIMEOUT_MS = 1000;
/** A write's wait for the standby, its cancel and the slack of a busy machine. */
const BUDGET_MS = STATEMENT_TIMEOUT_MS + 500 + 2000;
const LOST_FOR_MS = 4000;

const { pair, start } = replicatedBehindRelay();

test('When the synchronous standby is lost under write load, then no write is acknowledged while it is away (each a 503 problem within budget that says the change may or may not stand, as does one whose backend is terminated in that wait, though it stands on the primary), and after the primary is lost too and the standby promoted, every acknowledged write is on it', async () => {
  const { svc, load } = await startUnderTraffic(
    () => start(STATEMENT_TIMEOUT_MS),
    'sync-loss@example.com',
    4,
  );
  const token = await account(svc.base, 'sync-loss-direct@example.com');

  pair.killStandby(pair.standbyPort);
  const lostAt = Date.now();
  await sleep(LOST_FOR_MS);
  const direct = await call(svc.base, '/posts/', { token, json: { title: 'unconfirmed', content: 'c' } });
  await load.stop();
  // A write whose backend is terminated while it waits for the standby: its commit stands on the primary.
  const terminating = call(svc.base, '/posts/', { token, json: { title: 'terminated', content: 'c' } });
  const waiting = await pollUntil(
    () =>
      pair.query<{ pid: number }>(
        pair.primaryPort,
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
      ),
    (rows) => rows.length > 0,
    { withinMs: STATEMENT_TIMEOUT_MS / 2, everyMs: 20 },
  );
  await pair.query(pair.primaryPort, 'SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [
    waiting.value.map((row) => row.pid),
  ]);
  const terminated = await terminating;
  const terminatedOnPrimary = await pair.query(
    pair.primaryPort,
    "SELECT 1 FROM posts WHERE title = 'terminated'",
  );

  // The primary lost too; the standby back and promoted, as CloudNativePG fails over to it.
  pair.killPrimary();
  pair.startStandby(pair.standbyPort);
  pair.promoteStandby();
  const acknowledged = load.answers.flatMap((a) => (a.id === undefined ? [] : [a.id]));
  const stored = await storedOn(pair, pair.standbyPort, acknowledged);
  const writesWhileLost = load.answers.filter((a) => a.kind === 'create' && a.at - a.ms > lostAt);
  report('synchronous standby lost', {
    acknowledgedWrites: acknowledged.length,
    onPromotedStandby: stored.length,
    writesWhileLost: statusCounts(writesWhileLost),
    slowestWhileLostMs: Math.round(Math.max(...writesWhileLost.map((a) => a.ms))),
    direct: `${String(direct.status)} ${JSON.stringify(detailOf(direct))}`,
    terminated: `${String(terminated.status)} ${JSON.stringify(detailOf(terminated))}`,
  });

  expect(load.failures).toEqual([]);
  expect(acknowledged.length).toBeGreaterThan(0);
  expect(writesWhileLost.length).toBeGreaterThan(0);
  expect(writesWhileLost.every((a) => a.status === 503)).toBe(true);
  expectWithinBudget(writesWhileLost, BUDGET_MS);
  expect(direct.status).toBe(503);
  expect(detailOf(direct)).toContain('may or may not stand');
  expect(waiting.held).toBe(true);
  expect(terminated.status).toBe(503);
  expect(detailOf(terminated)).toContain('may or may not stand');
  expect(terminatedOnPrimary.length).toBe(1);
  expectAllStored(stored, acknowledged);
});
