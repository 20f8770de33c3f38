import {
  expectAllStored,
  expectWithinBudget,
  replicatedBehindRelay,
  report,
  sleep,
  statusCounts,
  storedOn,
} from './support';
import { startUnderTraffic } from '../../tools/harness/traffic';

/**
 * A failover as CloudNativePG runs one: the primary lost under write load, the synchronous standby
 * promoted, and the -rw Service (the relay here) moved to it. The relay is moved while the standby
 * is still read-only, as a Service may be, so writes meet a standby for a moment too.
 */
const STATEMENT_TIMEOUT_MS = 1500;
/** Longest a request may take while the database is away: connect or acquire (2.5 s), one statement and its cancel grace, slack. */
const BUDGET_MS = 2500 + STATEMENT_TIMEOUT_MS + 500 + 2000;
const WRITES_BACK_WITHIN_MS = 15_000;

const { pair, relay, start } = replicatedBehindRelay();

test('When the primary is lost under write load and the synchronous standby is promoted, then every acknowledged write is on the new primary, meanwhile only 503s answer, within budget, and writes succeed again within 15 s with no restart', async () => {
  const { svc, load } = await startUnderTraffic(() => start(STATEMENT_TIMEOUT_MS), 'failover@example.com', 6);

  pair.killPrimary();
  // Taken once the stop has returned: the stop blocks this process, and a probe sent before it may rightly say 200.
  const lostAt = Date.now();
  await sleep(1000);
  // The address leads to the standby before it is promoted: reads work there, writes do not.
  relay().retarget(pair.standbyPort);
  await sleep(1000);
  pair.promoteStandby();
  const promotedAt = Date.now();
  await load.writeAcknowledgedAfter(promotedAt + 1000, WRITES_BACK_WITHIN_MS + 5000);
  await sleep(1000);
  await load.stop();

  const acknowledged = load.answers.flatMap((a) => (a.id === undefined ? [] : [a.id]));
  const stored = await storedOn(pair, pair.standbyPort, acknowledged);
  const during = load.answers.filter((a) => a.at > lostAt && a.kind !== 'ready');
  const firstWriteBack = load.answers.find(
    (a) => a.kind === 'create' && a.status === 201 && a.at > promotedAt,
  );
  const readyDuring = load.answers.filter(
    (a) => a.kind === 'ready' && a.at - a.ms > lostAt && a.at < promotedAt,
  );
  const readyAtEnd = load.answers.filter((a) => a.kind === 'ready').at(-1);
  report('failover', {
    acknowledgedWrites: acknowledged.length,
    onNewPrimary: stored.length,
    statusesAfterLoss: statusCounts(during),
    slowestAfterLossMs: Math.round(Math.max(...during.map((a) => a.ms))),
    writesBackAfterPromotionMs: firstWriteBack ? firstWriteBack.at - promotedAt : 'never',
    readyBeforePromotion: statusCounts(readyDuring),
    readyAtEnd: readyAtEnd?.status,
    transportFailures: load.failures.length,
  });

  expect(load.failures).toEqual([]);
  expect(acknowledged.length).toBeGreaterThan(10);
  expectAllStored(stored, acknowledged);
  expectWithinBudget(during, BUDGET_MS);
  expect(during.some((a) => a.status === 503)).toBe(true);
  expect(readyDuring.length).toBeGreaterThan(0);
  expect(readyDuring.every((a) => a.status === 503)).toBe(true);
  expect(firstWriteBack).toBeDefined();
  expect((firstWriteBack?.at ?? Infinity) - promotedAt).toBeLessThanOrEqual(WRITES_BACK_WITHIN_MS);
  expect(readyAtEnd?.status).toBe(200);
  expect(svc.child.exitCode).toBeNull();
});
