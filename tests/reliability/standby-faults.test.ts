import { isProblem } from '../../tools/harness/problem';
import {
  account,
  call,
  replicatedBehindRelay,
  report,
  sleep,
  startService,
  statusCounts,
  type ServiceProcess,
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

interface Answered {
  kind: 'write' | 'read-back' | 'anonymous';
  status: number;
  problem: boolean;
  ms: number;
  at: number;
  /** For an acknowledged write, its post; for a read-back, whether the writer's post was on it. */
  id?: number;
  found?: boolean;
}

function traffic(apis: ServiceProcess[], tokens: string[]) {
  let stopped = false;
  const answers: Answered[] = [];
  const failures: string[] = [];
  const api = (i: number): string => {
    const chosen = apis[i % apis.length];
    if (!chosen) throw new Error('no API process');
    return chosen.base;
  };
  const record = (kind: Answered['kind'], a: Awaited<ReturnType<typeof call>>, extra = {}): Answered => {
    const answered = { kind, status: a.status, problem: isProblem(a), ms: a.ms, at: Date.now(), ...extra };
    answers.push(answered);
    return answered;
  };
  const guard = async (body: () => Promise<void>): Promise<void> => {
    try {
      await body();
    } catch (error) {
      failures.push(String(error));
      await sleep(100);
    }
  };
  const writer = async (w: number, token: string): Promise<void> => {
    for (let i = 0; !stopped; i++)
      await guard(async () => {
        // A word of its own that the title index serves.
        const title = `fw${String(w)}n${String(i)}q`;
        const created = await call(api(w + i), '/posts/', { token, json: { title, content: 'c' } });
        if (created.status !== 201) {
          record('write', created);
          await sleep(50);
          return;
        }
        const id = (created.body as { id: number }).id;
        record('write', created, { id });
        const read = await call(api(w + i + 1), `/posts/public?search=${encodeURIComponent(title)}`, {
          token,
        });
        const found = read.status === 200 && (read.body as { id: number }[]).some((p) => p.id === id);
        record('read-back', read, { id, found });
      });
  };
  const reader = async (r: number): Promise<void> => {
    for (let i = 0; !stopped; i++)
      await guard(async () => {
        record('anonymous', await call(api(r + i), `/posts/public?limit=${String(PAGE)}`));
      });
  };
  const done = Promise.all([
    ...tokens.map((token, w) => writer(w, token)),
    ...Array.from({ length: READERS }, (_, r) => reader(r)),
  ]);
  return {
    answers,
    failures,
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}

/** Two API processes on `env`, the writers' accounts, and a page of posts to read from the start. */
async function apisWithWriters(env: Record<string, string>) {
  const first = await startService(env);
  const apis = [first, await startService(env)];
  const tokens: string[] = [];
  for (let w = 0; w < WRITERS; w++)
    tokens.push(await account(first.base, `faults-writer${String(w)}@example.com`));
  for (let i = 0; i < PAGE; i++)
    await call(first.base, '/posts/', {
      token: tokens[0],
      json: { title: `seed ${String(i)}`, content: 'c' },
    });
  return { apis, tokens };
}

/**
 * The faults in turn under the traffic, each after a phase of it: a standby lost, replay paused on
 * the other, the primary lost and that standby promoted, the relay moved to it; then until the
 * writes are back. Returns when each began.
 */
async function theFaults(load: { answers: Answered[] }, moved: ReturnType<typeof relay>) {
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
  const deadline = movedAt + WRITES_BACK_WITHIN_MS;
  while (
    !load.answers.some((a) => a.kind === 'write' && a.status === 201 && a.at > movedAt + 1000) &&
    Date.now() < deadline
  )
    await sleep(200);
  return { standbyLostAt, pausedAt, primaryLostAt, movedAt };
}

test('When a standby is lost, replay paused on the other and the primary fails over to it under mixed traffic through two processes, then anonymous reads answer (a 503 within budget only while nothing can), every acknowledged write is on the new primary, and no writer reads a state without their own write', async () => {
  const moved = relay();
  const [synchronous, asynchronous] = cluster.standbyPorts as [number, number];
  const env = {
    DB_HOSTNAME: '127.0.0.1',
    DB_PORT: String(moved.port),
    DB_NAME: 'postgres',
    DB_READ_HOSTNAME: [synchronous, asynchronous].map((port) => `127.0.0.1:${String(port)}`).join(','),
    DB_READ_MAX_LAG_MS: String(MAX_LAG_MS),
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    BCRYPT_ROUNDS: '4',
  };
  const { apis, tokens } = await apisWithWriters(env);
  const load = traffic(apis, tokens);
  const { standbyLostAt, pausedAt, primaryLostAt, movedAt } = await theFaults(load, moved);
  await sleep(PHASE_MS);
  await load.stop();

  const acknowledged = load.answers.flatMap((a) => (a.kind === 'write' && a.id !== undefined ? [a.id] : []));
  const stored = (
    await cluster.query<{ id: number }>(synchronous, 'SELECT id FROM posts WHERE id = ANY($1::int[])', [
      acknowledged,
    ])
  ).map((r) => r.id);
  const anonymous = load.answers.filter((a) => a.kind === 'anonymous');
  const readBacks = load.answers.filter((a) => a.kind === 'read-back');
  const writes = load.answers.filter((a) => a.kind === 'write');
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
  expect(stored.sort((a, b) => a - b)).toEqual([...acknowledged].sort((a, b) => a - b));
  expect(stale).toEqual([]);
  for (const a of load.answers) {
    expect([200, 201, 503]).toContain(a.status);
    if (a.status === 503) expect(a.problem).toBe(true);
    expect(a.ms).toBeLessThan(BUDGET_MS);
  }
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
