import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { withBudgetShare } from './budget';
import type { Statement } from './statements';

/**
 * Reads on standbys (DB_READ_HOSTNAME): the statements a route marks as readable there go to a
 * standby that has replayed what the primary had written DB_READ_MAX_LAG_MS ago, else to the
 * primary. Which routes may read there, and why signed-in callers never do, is in
 * docs/operations.md ("Reads on standbys").
 *
 * The bound is checked against WAL positions, not clocks: every POSITION_INTERVAL_MS the primary's
 * current position is read and kept with the time it was seen; a read needs a standby whose replay
 * position is at least the oldest position seen within the bound. The check travels with the read
 * itself (one round trip, on whichever server a pooler hands the statement to), and a standby that
 * fails it is skipped until a probe finds it caught up. The times are the monotonic clock's: a wall
 * clock stepped back would make old positions look recent. An idle primary keeps its position, so a
 * standby that has replayed everything passes however long ago the last write was; one cut off from
 * the primary falls behind the first write made without it.
 */

/** How often the primary's WAL position is read. */
const POSITION_INTERVAL_MS = 100;
/** How often each standby's replay position is read, for the lag gauge and to take skipped ones back. */
const PROBE_INTERVAL_MS = 250;
/** How long positions are kept: the lag gauge reads at most this far back. */
const HISTORY_MS = 10 * 60_000;
/** The share of what is left of a request's database budget that one standby may take. */
const STANDBY_SHARE = 0.5;

/** Runs a statement on one pool (connection.ts's statement runner). */
export type Run = <Row, P extends object>(statement: Statement<P>, params: P) => Promise<Row[]>;

/** One standby endpoint: its pool and runner, opened by connection.ts. */
export interface StandbyPool {
  name: string;
  knex: Knex;
  run: Run;
}

/** Why a read meant for a standby went to the primary. */
export type FallbackReason = 'lagging' | 'error' | 'no_primary_position';

/** A position of the primary's WAL and when it was seen: first and last. */
interface Seen {
  lsn: bigint;
  first: number;
  last: number;
}

/** PostgreSQL's pg_lsn text (`16/B374D848`) as a number. */
export function parseLsn(text: string): bigint {
  const [high = '0', low = '0'] = text.split('/');
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}

const lsnText = (lsn: bigint): string =>
  `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;

/** The primary's WAL positions over time: which one a read needs, and how far a standby lags. */
export class PrimaryPositions {
  private readonly seen: Seen[] = [];
  /** Whether the last attempt to read the position failed (the primary unreachable, or a standby there). */
  unreachable = false;
  /** The primary's timeline (hex, as in WAL file names): positions compare only within one history. */
  timeline = '';

  record(lsn: bigint, at: number, timeline = this.timeline): void {
    const last = this.seen.at(-1);
    const sameHistory = timeline === this.timeline;
    this.timeline = timeline;
    if (sameHistory && last && last.lsn === lsn) last.last = at;
    else if (sameHistory && (!last || lsn > last.lsn)) this.seen.push({ lsn, first: at, last: at });
    else {
      // A lower position or another timeline: a new primary, promoted from a standby. Start again from it.
      this.seen.length = 0;
      this.seen.push({ lsn, first: at, last: at });
    }
    while (this.seen.length > 1 && (this.seen[0]?.last ?? at) < at - HISTORY_MS) this.seen.shift();
  }

  /**
   * The least position a standby must have replayed for a read at `now` to be at most `maxLagMs`
   * stale: the lowest one the primary was seen at within the bound. While the primary cannot be
   * reached, its last position seen: nothing acknowledged since can be read anyway, and reads go on.
   */
  required(now: number, maxLagMs: number): bigint | undefined {
    const within = this.seen.find((s) => s.last >= now - maxLagMs);
    if (within) return within.lsn;
    return this.unreachable ? this.seen.at(-1)?.lsn : undefined;
  }

  /**
   * Whether the position `required` gives at `now` is only the last one seen before the reads of it
   * failed: writes acknowledged since are not in it, unless the primary has in fact gone.
   */
  lost(now: number, maxLagMs: number): boolean {
    return this.unreachable && !this.seen.some((s) => s.last >= now - maxLagMs);
  }

  /** How long the primary has had WAL a standby at `replayed` lacks (0: it has all that was seen). */
  lagMs(replayed: bigint, now: number): number {
    const ahead = this.seen.find((s) => s.lsn > replayed);
    return ahead ? now - ahead.first : 0;
  }
}

/** The counts the metrics read (plain numbers: no label look-up per request). */
export interface ReadCounts {
  primary: number;
  standby: number;
  fallbacks: Record<FallbackReason, number>;
}

/** Where reads meant for standbys go; without standbys, the primary's runner, counted. */
export interface ReadRouter {
  run: Run;
  counts: ReadCounts;
  /** Each standby's last measured lag, in seconds (none when it could not be read). */
  lags(): { standby: string; seconds: number | undefined }[];
  close(): Promise<void>;
}

interface StandbyState {
  pool: StandbyPool;
  /** False after a failed check or error, until a probe finds it caught up. */
  fit: boolean;
  /** Why it was last set aside: the reason a read then goes to the primary. */
  setAside: FallbackReason;
  lagMs: number | undefined;
}

/** The guard's parameters: the least replay position, whether it is only the last one seen, the primary's timeline. */
interface GuardParams {
  standbyLeast: string;
  primaryLost: boolean;
  primaryTimeline: string;
}

/**
 * The statement as a standby runs it: the check of the replay position first, in a gating filter
 * the plan evaluates once before reading anything, then the statement itself, its rows in its order,
 * or none when the standby is behind. One row always comes back, so "behind" and "no rows" differ.
 * OFFSET 0 keeps the statement a subquery of its own, under the gate. While the primary's position
 * cannot be read, which a pooler whose server connections are all busy causes as well as a failover,
 * a standby serves only if it has lost its primary too (no WAL receiver connected) and has replayed
 * all it received: one still streaming may lack writes acknowledged since the last position seen.
 * A promoted one must be on the primary's timeline and have reached its position: promoted while
 * the primary at DB_HOSTNAME goes on taking writes, it has none of them, and its own WAL soon runs
 * past that position on a history of its own.
 */
function guarded<P extends object>(inner: Statement<P>): Statement<P & GuardParams> {
  const compiled = new WeakMap<Knex, { text: string; values: (params: P & GuardParams) => unknown[] }>();
  return {
    name: `${inner.name}_standby`,
    compile(knex) {
      const known = compiled.get(knex);
      if (known) return known;
      const { text, values } = inner.compile(knex);
      const slot = values({} as P).length + 1;
      const made = {
        text:
          `SELECT g.standby_fresh, q.* FROM (SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() >= $${String(slot)}::pg_lsn ` +
          `AND (NOT $${String(slot + 1)}::boolean OR (pg_last_wal_replay_lsn() >= coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) ` +
          `AND NOT EXISTS (SELECT FROM pg_stat_wal_receiver))) ` +
          `ELSE $${String(slot + 1)}::boolean OR (pg_current_wal_lsn() >= $${String(slot)}::pg_lsn ` +
          `AND substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) = $${String(slot + 2)}::text) END) AS standby_fresh) g ` +
          `LEFT JOIN LATERAL (SELECT true AS standby_row, o.* FROM (${text}) o WHERE g.standby_fresh OFFSET 0) q ON true`,
        values: (params: P & GuardParams) => [
          ...values(params),
          params.standbyLeast,
          params.primaryLost,
          params.primaryTimeline,
        ],
      };
      compiled.set(knex, made);
      return made;
    },
  };
}

/** A row of a guarded statement: the statement's columns and the two the guard adds, taken off before the rows go back. */
type GuardedRow = Record<string, unknown> & { standby_fresh?: boolean; standby_row?: boolean | null };

/** A statement's guarded form, made once per statement. */
const guardedForms = new WeakMap<object, Statement<never>>();
function guardedForm<P extends object>(inner: Statement<P>): Statement<P & GuardParams> {
  let form = guardedForms.get(inner) as Statement<P & GuardParams> | undefined;
  if (!form) {
    form = guarded(inner);
    guardedForms.set(inner, form);
  }
  return form;
}

export interface ReadRouterOptions {
  primary: Run;
  /** Where the primary's WAL position is read: a connection outside the request pool, which requests may hold. */
  positionKnex: Knex;
  standbys: StandbyPool[];
  maxLagMs: number;
  logger: Logger;
}

/** Records the primary's WAL position, the reads' measure of freshness; logs once when it is not readable. */
async function readPosition(positionKnex: Knex, positions: PrimaryPositions, logger: Logger): Promise<void> {
  const at = performance.now();
  try {
    const { rows } = await positionKnex.raw<{ rows: { lsn: string; timeline: string }[] }>(
      'SELECT pg_current_wal_lsn()::text AS lsn, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) AS timeline',
    );
    const row = rows[0];
    if (row === undefined) throw new Error('no WAL position');
    positions.record(parseLsn(row.lsn), at, row.timeline);
    positions.unreachable = false;
  } catch (error) {
    if (!positions.unreachable)
      logger.warn({ err: error }, "reads on standbys: the primary's WAL position is not readable");
    positions.unreachable = true;
  }
}

/** How far a standby has replayed: its lag, and whether it is fit for reads until the next probe. */
async function probe(
  state: StandbyState,
  positions: PrimaryPositions,
  maxLagMs: number,
  skipAfterMiss: boolean,
): Promise<void> {
  try {
    const { rows } = await state.pool.knex.raw<{ rows: { replayed: string | null; standby: boolean }[] }>(
      'SELECT pg_last_wal_replay_lsn()::text AS replayed, pg_is_in_recovery() AS standby',
    );
    const row = rows[0];
    const now = performance.now();
    // A primary where a standby was expected (a promoted one) has no replay lag; whether it has the
    // primary's position is each statement's check.
    if (!row?.standby) {
      state.lagMs = 0;
      state.fit = true;
      return;
    }
    const replayed = row.replayed === null ? 0n : parseLsn(row.replayed);
    state.lagMs = positions.lagMs(replayed, now);
    const least = positions.required(now, maxLagMs);
    // One endpoint in front of several standbys stays in use: each statement's check decides.
    state.fit = !skipAfterMiss || (least !== undefined && replayed >= least);
    state.setAside = 'lagging';
  } catch {
    state.lagMs = undefined;
    state.fit = false;
    state.setAside = 'error';
  }
}

/** Runs `round` now and again `intervalMs` after each ends (a slow server never stacks them up), until `stopped`. */
function repeat(intervalMs: number, round: () => Promise<unknown>, stopped: () => boolean): void {
  const again = (): void => {
    if (stopped()) return;
    setTimeout(() => {
      void round().finally(again);
    }, intervalMs).unref();
  };
  void round().finally(again);
}

/**
 * The statement on one standby, in its guarded form: its rows, or why the primary must answer
 * instead (the standby failed, or failed the check `guard` sets), the standby set aside for it.
 */
async function readOnStandby<Row, P extends object>(
  state: StandbyState,
  statement: Statement<P>,
  params: P,
  guard: GuardParams,
  skipAfterMiss: boolean,
  logger: Logger,
): Promise<Row[] | FallbackReason> {
  let rows: GuardedRow[];
  try {
    rows = await state.pool.run<GuardedRow, P & GuardParams>(guardedForm(statement), {
      ...params,
      ...guard,
    });
  } catch (error) {
    logger.debug({ err: error, standby: state.pool.name }, 'reads on standbys: a standby failed a read');
    if (skipAfterMiss) state.fit = false;
    state.setAside = 'error';
    return 'error';
  }
  if (rows[0]?.standby_fresh !== true) {
    if (skipAfterMiss) state.fit = false;
    state.setAside = 'lagging';
    return 'lagging';
  }
  const kept: Row[] = [];
  for (const row of rows) {
    if (row.standby_row !== true) continue;
    delete row.standby_fresh;
    delete row.standby_row;
    kept.push(row as Row);
  }
  return kept;
}

/** Without standbys: every read on the primary, counted as such. */
function primaryOnly(primary: Run, counts: ReadCounts): ReadRouter {
  return {
    run: (statement, params) => {
      counts.primary++;
      return primary(statement, params);
    },
    counts,
    lags: () => [],
    close: () => Promise.resolve(),
  };
}

/** Reads on standbys when there are any; otherwise every read on the primary. */
export function readRouter(options: ReadRouterOptions): ReadRouter {
  const { primary, positionKnex, maxLagMs, logger } = options;
  const counts: ReadCounts = {
    primary: 0,
    standby: 0,
    fallbacks: { lagging: 0, error: 0, no_primary_position: 0 },
  };
  if (options.standbys.length === 0) return primaryOnly(primary, counts);

  const positions = new PrimaryPositions();
  const states: StandbyState[] = options.standbys.map((pool): StandbyState => ({
    pool,
    fit: true,
    setAside: 'lagging',
    lagMs: undefined,
  }));
  // With one endpoint (a pooler over several standbys) each statement may reach another standby:
  // its own check decides, and the endpoint is never set aside for one standby's lag.
  const skipAfterMiss = states.length > 1;
  let next = 0;
  let closed = false;

  const stopped = () => closed;
  repeat(POSITION_INTERVAL_MS, () => readPosition(positionKnex, positions, logger), stopped);
  repeat(
    PROBE_INTERVAL_MS,
    () => Promise.all(states.map((state) => probe(state, positions, maxLagMs, skipAfterMiss))),
    stopped,
  );

  const onPrimary = <Row, P extends object>(
    statement: Statement<P>,
    params: P,
    reason: FallbackReason,
  ): Promise<Row[]> => {
    counts.primary++;
    counts.fallbacks[reason]++;
    return primary<Row, P>(statement, params);
  };

  const run: Run = async <Row, P extends object>(statement: Statement<P>, params: P): Promise<Row[]> => {
    const now = performance.now();
    const least = positions.required(now, maxLagMs);
    if (least === undefined) return onPrimary<Row, P>(statement, params, 'no_primary_position');
    const guard = {
      standbyLeast: lsnText(least),
      primaryLost: positions.lost(now, maxLagMs),
      primaryTimeline: positions.timeline,
    };
    let reason: FallbackReason = 'lagging';
    const start = next;
    next = (next + 1) % states.length;
    for (let i = 0; i < states.length; i++) {
      const state = states[(start + i) % states.length];
      if (!state) continue;
      if (!state.fit) {
        reason = state.setAside;
        continue;
      }
      // Half of what is left at most: a standby that hangs (its node lost) leaves the primary the rest.
      const read = await withBudgetShare(STANDBY_SHARE, () =>
        readOnStandby<Row, P>(state, statement, params, guard, skipAfterMiss, logger),
      );
      if (Array.isArray(read)) {
        counts.standby++;
        return read;
      }
      reason = read;
    }
    return onPrimary<Row, P>(statement, params, reason);
  };

  return {
    run,
    counts,
    lags: () =>
      states.map((s) => ({
        standby: s.pool.name,
        seconds: s.lagMs === undefined ? undefined : s.lagMs / 1000,
      })),
    close: async () => {
      closed = true;
      await Promise.all(states.map((s) => s.pool.knex.destroy()));
    },
  };
}

/** The reads' metrics, read from the router at scrape time. */
export function registerReadMetrics(registry: Registry, reads: () => ReadRouter | undefined): void {
  new Counter({
    name: 'db_reads_total',
    help: 'Reads that may go to a standby (anonymous reads of the public feed), by where they ran: primary or standby.',
    labelNames: ['target'] as const,
    registers: [registry],
    collect() {
      const router = reads();
      if (!router) return;
      this.reset();
      this.inc({ target: 'primary' }, router.counts.primary);
      this.inc({ target: 'standby' }, router.counts.standby);
    },
  });
  new Counter({
    name: 'db_read_fallbacks_total',
    help: 'Reads meant for a standby that ran on the primary, by reason: lagging (every standby behind DB_READ_MAX_LAG_MS), error (the standbys failed), no_primary_position (no WAL position of the primary known yet).',
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      const router = reads();
      if (!router) return;
      this.reset();
      for (const [reason, count] of Object.entries(router.counts.fallbacks)) this.inc({ reason }, count);
    },
  });
  new Gauge({
    name: 'db_standby_replay_lag_seconds',
    help: 'How long each standby of DB_READ_HOSTNAME has lacked WAL the primary had (0: it has all the primary was last seen with), measured every 0.25 s; absent while the standby cannot be reached.',
    labelNames: ['standby'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const { standby, seconds } of reads()?.lags() ?? [])
        if (seconds !== undefined) this.set({ standby }, seconds);
    },
  });
}
