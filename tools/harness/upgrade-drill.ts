/**
 * A rolling upgrade with the real parts, as a Deployment with maxSurge 1 and maxUnavailable 0
 * makes it: a recorded release (the previous one by default, or another of releases.ts
 * `upgradeSources`; built from the commit CHANGELOG.md records) serves a seeded database under
 * steady mixed traffic; this release starts beside it and migrates; both serve;
 * the previous one leaves the rotation and is stopped; this one serves alone. What clients saw,
 * what the database kept and what the counts say afterwards is the record the suite asserts on
 * (tests/reliability/upgrade.test.ts) and the benchmark prints (tools/bench/upgrade.ts).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import bcrypt from 'bcrypt';
import type { Knex } from 'knex';
import { BENCH_PASSWORD, insertRows, usersFor, vacuumAnalyze } from './seed';
import { countOf, createScratchDatabase, knexTo, rowsOf } from './postgres';
import { samples, scrape } from './metrics-text';
import { previousRelease, type Release } from './releases';
import { ROOT, startService, type LogLine, type ServiceProcess } from './service';
import {
  steadyTraffic,
  API_STATUSES,
  type Instance,
  type MixedAnswer,
  type SignedIn,
  type SteadyOptions,
  type SteadyTraffic,
} from './traffic';
import { call, login, sleep, countBy, vote, waitForStatus, type Answer } from './client';
import { shownVotes, VOTE_COUNTS, type VoteCount } from './vote-counts';

/** DB_STATEMENT_TIMEOUT_MS plus the grace the service gives a cancel: no client waits longer. */
const STATEMENT_BUDGET_MS = 2000;
export const ANSWER_BUDGET_MS = STATEMENT_BUDGET_MS + 500;
/** A surge replica must be ready well within a probe's patience. */
export const READY_BUDGET_MS = 30_000;

/** The files a release runs from; its dependencies are today's (a superset of its own). */
const RELEASE_FILES = ['service', 'migrations', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];

/**
 * The release's source tree, taken from this repository's history without the network, in a
 * folder under the OS temp dir named by its commit and by this checkout (built once, then reused),
 * with this checkout's node_modules linked in.
 */
export function buildRelease(release: Release): string {
  if (!release.commit) throw new Error(`release ${release.version} names no commit to build from`);
  const checkout = createHash('sha256').update(ROOT).digest('hex').slice(0, 8);
  const dir = path.join(tmpdir(), `sp-release-${release.commit}-${checkout}`);
  if (existsSync(path.join(dir, 'node_modules'))) return dir;
  // A folder whose node_modules link points nowhere (its checkout is gone) is rebuilt, not trusted.
  rmSync(dir, { recursive: true, force: true });
  const staging = mkdtempSync(path.join(tmpdir(), `sp-release-${release.commit.slice(0, 12)}-`));
  try {
    const archive = execFileSync('git', ['archive', '--format=tar', release.commit, ...RELEASE_FILES], {
      cwd: ROOT,
      maxBuffer: 256 * 1024 * 1024,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    execFileSync('tar', ['-x', '-C', staging], { input: archive });
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(staging, 'node_modules'), 'dir');
    // Whole or not at all: a half-extracted folder must never pass for the release.
    renameSync(staging, dir);
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    if (existsSync(path.join(dir, 'node_modules'))) return dir; // another run built it meanwhile
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    throw new Error(
      `cannot build release ${release.version} from ${release.commit}: ${reason} (a shallow clone lacks it: fetch the history)`,
      { cause: error },
    );
  }
  return dir;
}

/** Lines kept from a release's log: start-up, migrations, shutdown, backfill, and anything at warn or worse. */
const NOTABLE = /listening on|migrat|shutdown|closing|another replica|backfill/;
const keep = (line: LogLine): boolean => (line.level ?? 0) >= 40 || NOTABLE.test(line.msg ?? '');

export interface Started {
  svc: ServiceProcess;
  /** From spawn to the "listening" line (migrations included). */
  listeningMs: number;
  /** From spawn to the first 200 from /healthz/ready. */
  readyMs: number;
}

/** Starts a release from its folder (the repository root for this one) and waits until it is ready. */
export async function startRelease(cwd: string, env: NodeJS.ProcessEnv, withinMs: number): Promise<Started> {
  const spawned = Date.now();
  const svc = await startService(env, { cwd, keep, withinMs });
  const listeningMs = Date.now() - spawned;
  const ready = await waitForStatus(svc.base, '/healthz/ready', 200, withinMs);
  if (ready?.status !== 200)
    throw new Error(`${cwd}: /healthz/ready is ${String(ready?.status ?? 0)} after ${withinMs} ms`);
  return { svc, listeningMs, readyMs: Date.now() - spawned };
}

export interface UpgradeOptions {
  /** The release to upgrade from (default: the previous release). */
  release?: Release;
  posts: number;
  votes: number;
  /** The environment both releases get on `database` (same SECRET_KEY, LOG_LEVEL info, PORT 0). */
  env: (database: string) => NodeJS.ProcessEnv;
  /** bcrypt cost of the seeded users' one shared hash. */
  passwordRounds: number;
  perSecond?: number;
  /** Users of the seed who sign in and make the signed-in half of the traffic. */
  signedIn?: number;
  /** Only the previous release serves, before the new one is started. */
  warmMs?: number;
  /** Both serve. */
  bothMs?: number;
  /** The new one serves alone before the traffic stops. */
  aloneMs?: number;
  /** How long the new release may take to finish a background backfill after the traffic. */
  backfillWithinMs?: number;
  log?: (line: string) => void;
}

/** What the answers under load tell. */
export interface AnswerFigures {
  requests: number;
  /** Answers by status, and by which release gave them. */
  statuses: Record<string, number>;
  byInstance: Record<string, number>;
  /** 5xx answers, and requests that got no answer at all. */
  serverErrors: number;
  noAnswer: number;
  outsideApi: MixedAnswer[];
  overBudget: number;
  /** Answers past the budget, by phase and release. */
  overBudgetBy: Record<string, number>;
  slowest: MixedAnswer | undefined;
  /** The slowest answer in each phase. */
  slowestByPhase: Partial<Record<Phase, number>>;
  /** 5xx or no answer, per phase of the upgrade. */
  failedByPhase: Record<Phase, number>;
  /** Failed answers by status, release and detail. */
  failures: Record<string, number>;
}

export interface Figures extends AnswerFigures {
  posts: number;
  votes: number;
  seedSeconds: number;
  /** The errors each release logged (distinct messages, with how often). */
  logged: Record<string, number>;
  /** The previous release's start on an empty database, for comparison. */
  oldReadyMs: number;
  newListeningMs: number;
  newReadyMs: number;
  /** How the new release's vote-count backfill ended, and how long it took by its own log. */
  backfill: Backfill;
  oldExit: number | null;
}

export type Phase = 'old alone' | 'new starting' | 'both' | 'new alone';

export type Backfill =
  | { how: 'logged'; durationMs: number | null; rows: number | null; afterReadyMs: number }
  | { how: 'in migration' }
  | { how: 'not finished'; pendingNullCounts: number };

export interface Findings {
  /** Posts answered 201 that the database does not hold. */
  lostPosts: number[];
  /** Votes acknowledged (and not withdrawn since) that are missing, and withdrawn ones still there. */
  lostVotes: string[];
  undeadVotes: string[];
  /** Posts whose `votes` through the new release differs from their rows in `votes`. */
  apiMismatches: { id: number; api: number | string; rows: number }[];
  apiChecked: number;
  /** Posts whose stored count (`post_vote_counts`) differs from their rows in `votes` (null: none stored). */
  columnMismatches: { id: number; column: number | null; rows: number }[];
}

export interface UpgradeResult {
  release: Release;
  figures: Figures;
  findings: Findings;
}

/** Posts without a stored count: not counted yet. */
const UNCOUNTED = 'posts p WHERE NOT EXISTS (SELECT 1 FROM post_vote_counts c WHERE c.post_id = p.id)';

/** Metrics series named db_backfill_pending, with their values ([] when the release has none). */
async function pendingGauges(svc: ServiceProcess): Promise<number[]> {
  return samples(await scrape(svc.metricsPort), 'db_backfill_pending').map((s) => s.value);
}

/**
 * Waits for the new release's vote-count backfill to end. A release that backfills in the
 * background logs "backfill finished" (and exposes db_backfill_pending until then). One that has
 * neither, a few seconds after it became ready, counted during its migration: it is done when no
 * post lacks a count.
 */
async function backfillEnd(
  svc: ServiceProcess,
  k: Knex,
  readyAt: number,
  withinMs: number,
): Promise<Backfill> {
  const finished = () => svc.lines.find((l) => l.msg === 'backfill finished');
  const backgrounded = async () =>
    svc.lines.some((l) => /backfill/.test(l.msg ?? '')) || (await pendingGauges(svc)).length > 0;
  await sleep(Math.max(0, readyAt + 5000 - Date.now()));
  if (!finished() && !(await backgrounded())) {
    const nulls = await countOf(k, UNCOUNTED);
    return nulls === 0 ? { how: 'in migration' } : { how: 'not finished', pendingNullCounts: nulls };
  }
  try {
    await svc.waitForLog(/^backfill finished$/, withinMs);
  } catch {
    const nulls = await countOf(k, UNCOUNTED);
    return { how: 'not finished', pendingNullCounts: nulls };
  }
  const line = finished() as LogLine;
  const n = (v: unknown) => (typeof v === 'number' ? v : null);
  return {
    how: 'logged',
    durationMs: n(line.durationMs),
    rows: n(line.rows),
    afterReadyMs: line.at - readyAt,
  };
}

function loggedErrors(releases: [string, ServiceProcess][]): Record<string, number> {
  const seen: Record<string, number> = {};
  for (const [name, svc] of releases)
    for (const line of svc.lines.filter((l) => (l.level ?? 0) >= 50)) {
      const err = line.err as { message?: string } | undefined;
      const key = `${name}: ${line.msg ?? ''}${err?.message ? ` (${err.message})` : ''}`;
      seen[key] = (seen[key] ?? 0) + 1;
    }
  return seen;
}

/** Each post's stored count and rows in `votes`, for the ids given. */
async function voteCounts(k: Knex, ids: readonly number[]): Promise<Map<number, VoteCount>> {
  const rows = await rowsOf<VoteCount>(k, `${VOTE_COUNTS} WHERE p.id = ANY(?::int[])`, [ids as number[]]);
  return new Map(rows.map((r) => [r.id, r]));
}

async function check(
  k: Knex,
  base: string,
  token: string,
  load: ReturnType<typeof steadyTraffic>,
  hotPosts: readonly number[],
): Promise<Findings> {
  const createdIds = load.created.map((c) => c.id);
  const kept = new Set(
    await k<{ id: number }>('posts').whereRaw('id = ANY(?::int[])', [createdIds]).pluck('id'),
  );
  const lostPosts = createdIds.filter((id) => !kept.has(id));

  const pairs = [...load.votes.entries()].filter(([, state]) => state !== 'unknown');
  const stored = new Set(
    (
      await rowsOf<{ key: string }>(
        k,
        `SELECT user_id || ':' || post_id AS key FROM votes
         WHERE (user_id, post_id) IN (SELECT * FROM unnest(?::int[], ?::int[]))`,
        [pairs.map(([key]) => Number(key.split(':')[0])), pairs.map(([key]) => Number(key.split(':')[1]))],
      )
    ).map((r) => r.key),
  );
  const lostVotes = pairs.filter(([key, s]) => s === 'present' && !stored.has(key)).map(([key]) => key);
  const undeadVotes = pairs.filter(([key, s]) => s === 'absent' && stored.has(key)).map(([key]) => key);

  // Through the API: every post the traffic voted on or created, and the newest posts of the
  // public list (where the seeded votes gather), each against its rows in `votes`.
  const votedOn = [...load.votes.keys()].map((key) => Number(key.split(':')[1]));
  const shown = new Map<number, number | string>();
  for (let skip = 0; skip < 1000; skip += 100) {
    const page = await call(base, `/posts/public?limit=100&skip=${String(skip)}`);
    for (const post of page.body as { id: number; votes: number }[]) shown.set(post.id, post.votes);
  }
  const ids = [...new Set([...votedOn, ...createdIds, ...hotPosts.slice(0, 200)])].filter(
    (id) => !shown.has(id),
  );
  for (const [id, votes] of await shownVotes(base, ids, () => token)) shown.set(id, votes);
  const counts = await voteCounts(k, [...shown.keys()]);
  const apiMismatches = [...shown.entries()]
    .filter(([id, api]) => api !== (counts.get(id)?.rows ?? 0))
    .map(([id, api]) => ({ id, api, rows: counts.get(id)?.rows ?? 0 }));

  const columnMismatches = (
    await rowsOf<VoteCount>(
      k,
      `${VOTE_COUNTS} WHERE s.votes IS DISTINCT FROM coalesce(c.n, 0) ORDER BY p.id LIMIT 1000`,
    )
  ).map(({ id, stored, rows }) => ({ id, column: stored, rows }));

  return { lostPosts, lostVotes, undeadVotes, apiMismatches, apiChecked: shown.size, columnMismatches };
}

/** The previous release on a fresh database, migrated by itself, then filled in bulk. */
async function seedPrevious(
  { dir, k, start, log }: Scratch,
  options: UpgradeOptions,
): Promise<{ old: Started; seedSeconds: number; migrations: string[] }> {
  const old = await start(dir, 120_000);
  const migrations = await k<{ name: string }>('knex_migrations').orderBy('id').pluck('name');
  const users = usersFor(options.posts);
  log(`seeding ${String(users)} users, ${String(options.posts)} posts, ~${String(options.votes)} votes`);
  const began = Date.now();
  // One hash for all: hashing each user's would take hours, and a login costs the same.
  const passwordHash = await bcrypt.hash(BENCH_PASSWORD, options.passwordRounds);
  await insertRows(k, { users, posts: options.posts, votes: options.votes, passwordHash, voteCounts: false });
  await vacuumAnalyze(k);
  return { old, seedSeconds: (Date.now() - began) / 1000, migrations };
}

/** What an upgrade case runs in: the release (the previous one by default) built, and a scratch database. */
interface Scratch {
  release: Release;
  dir: string;
  k: Knex;
  log: (line: string) => void;
  /** Starts a release from `cwd` on the database; every one started is killed at the end, whatever happened. */
  start: (cwd: string, withinMs: number) => Promise<Started>;
}

/** Runs `use` on a scratch database (prefix `label`) beside the release built; kills, closes and drops after. */
async function inScratch<T>(
  options: Pick<UpgradeOptions, 'release' | 'env' | 'log'>,
  label: string,
  use: (scratch: Scratch) => Promise<T>,
): Promise<T> {
  const release = options.release ?? previousRelease();
  const dir = buildRelease(release);
  const database = await createScratchDatabase(label);
  const k = knexTo(database.name, 2);
  const started: ServiceProcess[] = [];
  const start = async (cwd: string, withinMs: number) => {
    const one = await startRelease(cwd, options.env(database.name), withinMs);
    started.push(one.svc);
    return one;
  };
  try {
    return await use({ release, dir, k, log: options.log ?? (() => undefined), start });
  } finally {
    await Promise.all(started.map((svc) => svc.stop('SIGKILL')));
    await k.destroy();
    await database.drop();
  }
}

/** What the answers under load tell: statuses, where they failed or were slow, by phase and instance. */
function answerFigures(answers: MixedAnswer[]): AnswerFigures {
  const phaseOf = (a: MixedAnswer): Phase => a.phase as Phase;
  const failed = answers.filter((a) => a.status === 0 || a.status >= 500);
  const failedByPhase: Record<Phase, number> = { 'old alone': 0, 'new starting': 0, both: 0, 'new alone': 0 };
  for (const a of failed) failedByPhase[phaseOf(a)] += 1;
  const slowestByPhase: Partial<Record<Phase, number>> = {};
  for (const a of answers) {
    const at = phaseOf(a);
    slowestByPhase[at] = Math.round(Math.max(slowestByPhase[at] ?? 0, a.ms));
  }
  const overBudget = answers.filter((a) => a.ms > ANSWER_BUDGET_MS);
  return {
    requests: answers.length,
    statuses: countBy(answers, (a) => a.status),
    byInstance: countBy(answers, (a) => a.instance),
    serverErrors: answers.filter((a) => a.status >= 500).length,
    noAnswer: answers.filter((a) => a.status === 0).length,
    outsideApi: answers.filter((a) => !API_STATUSES[a.kind].includes(a.status)),
    overBudget: overBudget.length,
    overBudgetBy: countBy(overBudget, (a) => `${a.phase} @${a.instance}`),
    slowest: answers.reduce<MixedAnswer | undefined>((s, a) => (!s || a.ms > s.ms ? a : s), undefined),
    failedByPhase,
    slowestByPhase,
    failures: countBy(failed, (a) => `${String(a.status)} ${a.instance}: ${a.error ?? ''}`),
  };
}

/** Throws unless the previous release applied exactly the migrations of its own folder. */
function expectOwnMigrations(dir: string, release: Release, applied: readonly string[]): void {
  // Its migrations are the files of its own migrations/ folder (index.ts lists them).
  const own = readdirSync(path.join(dir, 'migrations')).filter((f) => /^\d+_\w+\.ts$/.test(f));
  if (applied.length !== own.length || own.length === 0)
    throw new Error(
      `release ${release.version} applied ${applied.join(', ')}: expected its ${String(own.length)} migrations`,
    );
}

/** Signs in the seed's first `users` users, one after another. */
async function signIn(base: string, users: number): Promise<SignedIn[]> {
  const signedIn: SignedIn[] = [];
  for (let id = 1; id <= users; id++)
    signedIn.push({
      id,
      token: await login(base, `user${String(id)}@bench.example`, BENCH_PASSWORD),
    });
  return signedIn;
}

/** The ids of the `limit` newest published posts, newest first. */
async function newestPublished(k: Knex, limit: number): Promise<number[]> {
  const sql = 'SELECT id FROM posts WHERE published ORDER BY created_at DESC, id DESC LIMIT ?';
  return (await rowsOf<{ id: number }>(k, sql, [limit])).map((r) => r.id);
}

/** Which replicas are in rotation and what the upgrade is doing: the traffic reads both as it sends. */
interface Stage {
  rotation: Instance[];
  phase: Phase;
}

/** Logs every few seconds how much of the traffic was answered, failed or still waits. */
function reportProgress(load: SteadyTraffic, log: (line: string) => void): NodeJS.Timeout {
  return setInterval(() => {
    const failed = load.answers.filter((a) => a.status === 0 || a.status >= 500).length;
    log(
      `${String(load.answers.length)} answered (${String(failed)} failed), ${String(load.pending())} waiting`,
    );
  }, 5000);
}

/**
 * Unrecorded traffic for a few seconds: a release that has served for days has its code compiled and
 * every statement prepared on every connection; a cold one would blame its own first seconds on the upgrade.
 */
async function warmUp(mix: SteadyOptions, running: { stop(): Promise<void> }[]): Promise<void> {
  const warm = steadyTraffic(mix);
  running.push(warm);
  await sleep(5000);
  await warm.stop();
}

/** Starts this release beside the previous one and puts both in rotation once it is ready. */
async function startBeside(stage: Stage, { start, log }: Scratch): Promise<Started> {
  log('starting this release beside it');
  stage.phase = 'new starting';
  const fresh = await start(ROOT, 300_000);
  log(`this release ready after ${String(fresh.readyMs)} ms`);
  stage.rotation = [...stage.rotation, { name: 'new', base: fresh.svc.base }];
  stage.phase = 'both';
  return fresh;
}

/** Takes the previous release out of rotation, then stops it as Kubernetes would; resolves with its exit code. */
async function retireOld(
  stage: Stage,
  old: ServiceProcess,
  fresh: Started,
  log: (line: string) => void,
): Promise<number | null> {
  // Out of the Service's endpoints first, then SIGTERM: terminus drains what it still has.
  stage.rotation = [{ name: 'new', base: fresh.svc.base }];
  stage.phase = 'new alone';
  log('the previous release out of rotation; SIGTERM');
  // SIGKILL after a minute without an exit; the timer goes with the exit, or jest waits it out.
  const kill = setTimeout(() => void old.stop('SIGKILL'), 60_000);
  const oldExit = await old.stop('SIGTERM');
  clearTimeout(kill);
  log(`the previous release exited with ${String(oldExit)}`);
  return oldExit;
}

/**
 * The whole upgrade on a scratch database (dropped afterwards): seed under the previous release,
 * traffic, the surge replica, both serving, the old one stopped, the new one alone; then what the
 * database holds.
 */
export async function runUpgrade(options: UpgradeOptions): Promise<UpgradeResult> {
  return inScratch(options, 'sp_upgrade', async (scratch) => {
    const { release, dir, k, log } = scratch;
    // Whatever fails, no traffic outlives the case (stopped before the processes are).
    const running: { stop(): Promise<void> }[] = [];
    let progress: NodeJS.Timeout | undefined;
    try {
      const seeded = await seedPrevious(scratch, options);
      const old = seeded.old.svc;
      expectOwnMigrations(dir, release, seeded.migrations);
      const seededVotes = await countOf(k, 'votes');
      log(`seeded in ${seeded.seedSeconds.toFixed(1)} s (${String(seededVotes)} votes)`);

      const signedIn = await signIn(old.base, options.signedIn ?? 10);
      const hotPosts = await newestPublished(k, 2000);

      void old.exited.then((code) => {
        log(`the previous release exited (${String(code)})`);
      });
      const oldInstance: Instance = { name: `old ${release.version}`, base: old.base };
      const stage: Stage = { rotation: [oldInstance], phase: 'old alone' };
      const mix: SteadyOptions = {
        rotation: () => stage.rotation,
        perSecond: options.perSecond ?? 90,
        users: signedIn,
        hotPosts,
        maxPostId: options.posts,
      };
      await warmUp(mix, running);
      const load = steadyTraffic({ ...mix, phase: () => stage.phase });
      running.push(load);
      progress = reportProgress(load, log);
      await sleep(options.warmMs ?? 5000);

      const fresh = await startBeside(stage, scratch);
      const readyAt = Date.now();
      await sleep(options.bothMs ?? 8000);
      const oldExit = await retireOld(stage, old, fresh, log);
      await sleep(options.aloneMs ?? 5000);
      await load.stop();
      clearInterval(progress);
      log(`traffic stopped after ${String(load.answers.length)} requests`);

      const backfill = await backfillEnd(fresh.svc, k, readyAt, options.backfillWithinMs ?? 120_000);
      log(`backfill: ${JSON.stringify(backfill)}; checking writes and counts`);
      const findings = await check(k, fresh.svc.base, signedIn[0]?.token ?? '', load, hotPosts);

      const figures: Figures = {
        posts: options.posts,
        votes: seededVotes,
        seedSeconds: seeded.seedSeconds,
        ...answerFigures(load.answers),
        logged: loggedErrors([
          [oldInstance.name, old],
          ['new', fresh.svc],
        ]),
        oldReadyMs: seeded.old.readyMs,
        newListeningMs: fresh.listeningMs,
        newReadyMs: fresh.readyMs,
        backfill,
        oldExit,
      };
      return { release, figures, findings };
    } finally {
      clearInterval(progress);
      await Promise.all(running.map((traffic) => traffic.stop()));
    }
  });
}

/** One line of figures: what an operator would ask first. */
export function summary(result: UpgradeResult): Record<string, unknown> {
  const f = result.figures;
  return {
    from: result.release.version,
    posts: f.posts,
    votes: f.votes,
    requests: f.requests,
    failed: f.serverErrors + f.noAnswer,
    serverErrors: f.serverErrors,
    noAnswer: f.noAnswer,
    outsideApi: f.outsideApi.length,
    overBudget: f.overBudget,
    overBudgetBy: f.overBudgetBy,
    slowestMs: Math.round(f.slowest?.ms ?? 0),
    slowest: f.slowest ? `${f.slowest.kind}@${f.slowest.instance}:${String(f.slowest.status)}` : '',
    readyMs: f.newReadyMs,
    oldReadyMs: f.oldReadyMs,
    oldExit: f.oldExit,
    backfill: f.backfill,
    failedByPhase: f.failedByPhase,
    slowestByPhase: f.slowestByPhase,
    failures: f.failures,
    logged: f.logged,
    statuses: f.statuses,
    byInstance: f.byInstance,
    seedSeconds: f.seedSeconds,
  };
}

export interface OldOnNewResult {
  release: Release;
  /** Answers of the previous release, after this one migrated, that were not a success. */
  wrong: { call: string; status: number; detail: string }[];
  answered: number;
  /** Posts whose votes through either release, or whose stored count, differ from their rows. */
  mismatches: {
    id: number;
    old: number | string;
    new: number | string;
    column: number | null;
    rows: number;
  }[];
  checked: number;
}

/** Signed-in users taking turns and the newest published posts: what the old-on-new case calls with. */
interface Callers {
  token: (i: number) => string;
  hot: readonly number[];
}

/** What the old release's answers under the new schema came to, as `judge` records them. */
type Verdicts = Pick<OldOnNewResult, 'wrong' | 'answered'>;

/** Ten clients' reads at once, the `round`th time: each the public list, its own list and one of the newest posts. */
const readRound = ({ token, hot }: Callers, base: string, round: number): Promise<Answer[]> =>
  Promise.all(
    Array.from({ length: 10 }, (_, n) => n + round).flatMap((i) => [
      call(base, '/posts/public', {}),
      call(base, '/posts/', { token: token(i) }),
      call(base, `/posts/${String(hot[i % hot.length])}`, { token: token(i) }),
    ]),
  );

/** Counts an answer, and records it as wrong unless its status is one of `ok`. */
const judge = (verdicts: Verdicts, what: string, ok: readonly number[]) => (answer: Answer) => {
  verdicts.answered += 1;
  if (!ok.includes(answer.status))
    verdicts.wrong.push({
      call: what,
      status: answer.status,
      detail: JSON.stringify(answer.body).slice(0, 200),
    });
  return answer;
};

/** Serves reads and votes concurrently, so the old release's pool is as after days of service. */
async function primeConnections(callers: Callers, base: string): Promise<void> {
  const { token, hot } = callers;
  // Ten at once, more than once: the statements get prepared on every connection of its pool.
  for (let round = 0; round < 5; round++) await readRound(callers, base, round);
  await Promise.all(
    hot.slice(20, 30).map((id, i) => vote(base, token(i), id, 1).then(() => vote(base, token(i), id, 0))),
  );
}

/** Votes, withdraws and reads through the old release on the migrated schema, judging every answer. */
async function serveOnNewSchema(
  callers: Callers,
  base: string,
  votedOn: readonly number[],
  verdicts: Verdicts,
): Promise<void> {
  const { token } = callers;
  // Votes through the previous release: cast (409 when the seed had one), then half withdrawn.
  const cast = await Promise.all(
    votedOn.map((id, i) => vote(base, token(i), id, 1).then(judge(verdicts, 'cast a vote', [201, 409]))),
  );
  await Promise.all(
    votedOn.map((id, i) =>
      i % 2 === 0 && cast[i]?.status === 201
        ? vote(base, token(i), id, 0).then(judge(verdicts, 'withdraw a vote', [201]))
        : Promise.resolve(),
    ),
  );
  for (let round = 0; round < 3; round++)
    (await readRound(callers, base, round)).forEach(judge(verdicts, 'read', [200]));
}

/** The posts whose votes through either release, or whose stored count, differ from their rows in `votes`. */
async function countMismatches(
  k: Knex,
  token: string,
  bases: { old: string; new: string },
  votedOn: number[],
): Promise<OldOnNewResult['mismatches']> {
  const old = await shownVotes(bases.old, votedOn, () => token);
  const fresh = await shownVotes(bases.new, votedOn, () => token);
  const counts = await voteCounts(k, votedOn);
  return votedOn.flatMap((id) => {
    const seen = { old: old.get(id) ?? '', new: fresh.get(id) ?? '' };
    const n = counts.get(id)?.rows ?? 0;
    const column = counts.get(id)?.stored ?? null;
    return seen.old !== n || seen.new !== n || column !== n ? [{ id, ...seen, column, rows: n }] : [];
  });
}

/**
 * The previous release (or `options.release`) keeps serving on the schema this release migrated
 * to: it reads, lists and takes votes (and their withdrawals), and every count either release
 * shows, and the stored one, is the rows in `votes`. Before the migration it serves concurrently
 * for a while, so every pooled connection holds its prepared statements, as after days of service.
 */
export async function runOldOnNewSchema(
  options: Pick<UpgradeOptions, 'release' | 'posts' | 'env' | 'passwordRounds' | 'log'>,
): Promise<OldOnNewResult> {
  return inScratch(options, 'sp_upgrade_old', async (scratch) => {
    const { release, k, log, start } = scratch;
    const seeded = await seedPrevious(scratch, { ...options, votes: options.posts });
    const old = seeded.old.svc;
    const tokens = (await signIn(old.base, 4)).map((user) => user.token);
    const token = (i: number) => tokens[i % tokens.length] ?? '';
    const callers: Callers = { token, hot: await newestPublished(k, 40) };
    await primeConnections(callers, old.base);

    log('starting this release beside it');
    const fresh = await start(ROOT, 300_000);

    const verdicts: Verdicts = { wrong: [], answered: 0 };
    const votedOn = callers.hot.slice(0, 20);
    await serveOnNewSchema(callers, old.base, votedOn, verdicts);
    const mismatches = await countMismatches(k, token(0), { old: old.base, new: fresh.svc.base }, votedOn);
    return { release, ...verdicts, mismatches, checked: votedOn.length };
  });
}
