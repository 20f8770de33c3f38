import { expectWithinBudget, replicatedBehindRelay, report, sleep, statusCounts } from './support';
import { startUnderTraffic } from '../../tools/harness/traffic';

/**
 * The primary's node vanishes from the network: its connections stall (nothing answers, nothing
 * closes, so no server-side time-out can fire and no error reaches the driver), new connections to
 * the address hang too; then the standby is promoted and the address leads to it. The connections
 * already stalled stay stalled for good, as they would.
 */
const STATEMENT_TIMEOUT_MS = 1500;
/**
 * A request's budget while connections stall: it runs at most two statements one after the other
 * (the token's user, then its query), each waiting at most 2.5 s for a connection (a new one gives
 * up after 2 s) and then at most the statement time-out plus the 0.5 s cancel grace; plus slack.
 */
const BUDGET_MS = 2 * (2500 + STATEMENT_TIMEOUT_MS + 500) + 1000;
const WRITES_BACK_WITHIN_MS = 15_000;

const { pair, relay, start } = replicatedBehindRelay();

test('When the primary node vanishes (connections stall without closing) and a new primary appears at the address, then no request runs past its budget, each answer is a success or a 503, and writes are back within 15 s with no restart', async () => {
  // Enough workers that the pool holds many connections when they stall.
  const { svc, load } = await startUnderTraffic(
    () => start(STATEMENT_TIMEOUT_MS),
    'lost-node@example.com',
    12,
  );

  const stalledAt = Date.now();
  const heldWhenStalled = relay().connections;
  relay().stall();
  await sleep(4000);
  pair.promoteStandby();
  relay().retarget(pair.standbyPort);
  const movedAt = Date.now();
  await load.writeAcknowledgedAfter(movedAt, WRITES_BACK_WITHIN_MS + 5000);
  await sleep(1000);
  await load.stop();

  const after = load.answers.filter((a) => a.at > stalledAt);
  const api = after.filter((a) => a.kind !== 'ready');
  const firstWriteBack = load.answers.find((a) => a.kind === 'create' && a.status === 201 && a.at > movedAt);
  const readyWhileStalled = after.filter((a) => a.kind === 'ready' && a.at < movedAt);
  report('lost node', {
    connectionsStalled: heldWhenStalled,
    statusesAfterStall: statusCounts(api),
    slowestMs: Math.round(Math.max(...after.map((a) => a.ms))),
    budgetMs: BUDGET_MS,
    readyWhileStalled: statusCounts(readyWhileStalled),
    writesBackAfterMoveMs: firstWriteBack ? firstWriteBack.at - movedAt : 'never',
    transportFailures: load.failures.length,
  });

  expect(heldWhenStalled).toBeGreaterThan(1);
  expect(load.failures).toEqual([]);
  expectWithinBudget(after, BUDGET_MS);
  expect(api.some((a) => a.status === 503)).toBe(true);
  expect(readyWhileStalled.some((a) => a.status === 503)).toBe(true);
  expect(firstWriteBack).toBeDefined();
  expect((firstWriteBack?.at ?? Infinity) - movedAt).toBeLessThanOrEqual(WRITES_BACK_WITHIN_MS);
  expect(svc.child.exitCode).toBeNull();
});
