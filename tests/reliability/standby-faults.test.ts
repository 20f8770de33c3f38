import { pollUntil } from '../../tools/harness/poll';
import {
  expectAllStored,
  expectWithinBudget,
  readBackTraffic,
  readingApis,
  replicatedBehindRelay,
  report,
  sleep,
  statusCounts,
  storedOn,
  type ReadBackAnswer,
} from './support';

/**
 * Reads on standbys under faults, with real parts: a primary behind a relay (the -rw Service, which
 * a failover moves), a synchronous and an asynchronous standby as DB_READ_HOSTNAME, two API
 * processes. While writers post through one process and read back through the other, and anonymous
 * readers read the feed through either: the asynchronous standby is lost, replay is paused on the
 * synchronous one, then the primary is lost, the paused standby promoted and the relay moved to it,
 * and the lost standby comes back following it.
 * - anonymous reads answer 200, or a 503 problem within the request budget only while no server
 *   can answer (the primary lost, not yet replaced);
 * - every acknowledged write is on the new primary;
 * - no writer's read-back answers without their own write (a 503 is no answer, not a stale one).
 */
const MAX_LAG_MS = 1000;
const STATEMENT_TIMEOUT_MS = 1500;
/** Longest a request may take while the database is away: connect or acquire, one statement and its cancel grace, slack. */
const BUDGET_MS = 2500 + STATEMENT_TIMEOUT_MS + 500 + 2000;
const WRITERS = 6;
const READERS = 4;
const PAGE = 10;
/** Each phase's length: long enough for the probes to see the change and traffic to meet it. */
const PHASE_MS = 4000;
/** From the relay's move, how soon writes must be acknowledged again. */
const WRITES_BACK_WITHIN_MS = 15_000;
/** Anonymous reads may get a 503 from the primary's loss until this long after the relay moved. */
const READS_BACK_WITHIN_MS = 5000;

const { pair: cluster, relay } = replicatedBehindRelay({ standbys: 2 });

/**
 * The faults in turn under the traffic, each after a phase of it: a standby lost, replay paused on
 * the other, the primary lost and that standby promoted, the relay moved to it; then until the
 * writes are back. Returns when each began.
 */
async function theFaults(load: { answers: ReadBackAnswer[] }, moved: ReturnType<typeof relay>) {
  const [synchronous, asynchronous] = cluster.standbyPorts as [number, number];
  await sleep(PHASE_MS);
  const standbyLostAt = Date.now();
  cluster.killStandby(asynchronous);
  await sleep(PHASE_MS);
  const pausedAt = Date.now();
  await cluster.pauseReplay(synchronous);
  await sleep(PHASE_MS);
  const primaryLostAt = Date.now();
  cluster.killPrimary();
  await sleep(1000);
  // Promotion ends the pause: the standby replays what it received, every commit the primary acknowledged.
  cluster.promoteStandby();
  moved.retarget(synchronous);
  const movedAt = Date.now();
  cluster.follow(asynchronous, synchronous);
  // The window runs from the move: the lost standby's restart above already took part of it.
  await pollUntil(
    () => load.answers.some((a) => a.kind === 'write' && a.status === 201 && a.at > movedAt + 1000),
    (back) => back,
    { withinMs: movedAt + WRITES_BACK_WITHIN_MS - Date.now(), everyMs: 200 },
  );
  return { standbyLostAt, pausedAt, primaryLostAt, movedAt };
}

test('When a standby is lost, replay paused on the other and the primary fails over to it under mixed traffic through two processes, then anonymous reads answer (a 503 within budget only while nothing can), every acknowledged write is on the new primary, and no writer reads a state without their own write', async () => {
  const moved = relay();
  const [synchronous, asynchronous] = cluster.standbyPorts as [number, number];
  const { apis, tokens } = await readingApis({
    primary: moved.port,
    standbys: [synchronous, asynchronous],
    database: 'postgres',
    maxLagMs: MAX_LAG_MS,
    statementTimeoutMs: STATEMENT_TIMEOUT_MS,
    label: 'faults',
    writers: WRITERS,
    page: PAGE,
  });
  const load = readBackTraffic(apis, tokens, { readers: READERS, page: PAGE });
  const { standbyLostAt, pausedAt, primaryLostAt, movedAt } = await theFaults(load, moved);
  await sleep(PHASE_MS);
  await load.stop();

  const acknowledged = load.answers.flatMap((a) => (a.kind === 'write' && a.id !== undefined ? [a.id] : []));
  const stored = await storedOn(cluster, synchronous, acknowledged);
  const [writes, readBacks, anonymous] = [load.of('write'), load.of('read-back'), load.of('anonymous')];
  const stale = readBacks.filter((a) => a.status === 200 && a.found !== true);
  const phase = (from: number, to: number) => anonymous.filter((a) => a.at > from && a.at <= to);
  const anonymous503Outside = anonymous.filter(
    (a) => a.status !== 200 && (a.at < primaryLostAt || a.at > movedAt + READS_BACK_WITHIN_MS),
  );
  const firstWriteBack = writes.find((a) => a.status === 201 && a.at > movedAt);
  report('standby faults', {
    acknowledgedWrites: acknowledged.length,
    onNewPrimary: stored.length,
    writes: statusCounts(writes),
    readBacks: statusCounts(readBacks),
    staleReadBacks: stale.length,
    anonymousBeforeFaults: statusCounts(phase(0, standbyLostAt)),
    anonymousOneStandbyLost: statusCounts(phase(standbyLostAt, pausedAt)),
    anonymousOtherPaused: statusCounts(phase(pausedAt, primaryLostAt)),
    anonymousPrimaryLost: statusCounts(phase(primaryLostAt, movedAt)),
    anonymousAfterMove: statusCounts(phase(movedAt, Infinity)),
    anonymous503OutsideOutage: anonymous503Outside.length,
    slowestMs: Math.round(Math.max(...load.answers.map((a) => a.ms))),
    budgetMs: BUDGET_MS,
    writesBackAfterMoveMs: firstWriteBack ? firstWriteBack.at - movedAt : 'never',
    transportFailures: load.failures.length,
  });

  expect(load.failures).toEqual([]);
  expect(acknowledged.length).toBeGreaterThan(100);
  expectAllStored(stored, acknowledged);
  expect(stale).toEqual([]);
  expectWithinBudget(load.answers, BUDGET_MS);
  expect(anonymous503Outside).toEqual([]);
  // Reads went on through each fault before the primary's loss, and after the move.
  for (const [from, to] of [
    [standbyLostAt, pausedAt],
    [pausedAt, primaryLostAt],
    [movedAt + READS_BACK_WITHIN_MS, Infinity],
  ] as const)
    expect(phase(from, to).filter((a) => a.status === 200).length).toBeGreaterThan(0);
  expect(firstWriteBack).toBeDefined();
  expect((firstWriteBack?.at ?? Infinity) - movedAt).toBeLessThanOrEqual(WRITES_BACK_WITHIN_MS);
  for (const svc of apis) expect(svc.child.exitCode).toBeNull();
}, 120_000);
