import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { backfills as shipped, type Backfill } from '../../../migrations';
import type { Database } from './connection';
import { errorWithHint } from './errors';

/**
 * Background backfills: a migration's data change run in small batches after the release is
 * ready, never inside the schema transaction (docs/migrations.md). Progress lives in
 * `schema_backfills`, so a restart or another replica carries on from the last batch; each batch
 * takes that row FOR UPDATE, so replicas never fill the same range at once. A backfill walks ids
 * up to the table's last id when it began: rows inserted later never need it.
 */

/** Ids per batch: each batch holds its rows' locks for a few milliseconds (docs/migrations.md). */
export const BACKFILL_BATCH_IDS = 1000;
/** The pause between batches, which leaves the database to requests. */
const PAUSE_MS = 20;
/** How often a running backfill logs its progress. */
const PROGRESS_EVERY_MS = 5000;
/** The wait before a failed batch is tried again, doubled up to the cap while it keeps failing. */
const RETRY_MS = 1000;
const RETRY_CAP_MS = 30_000;

interface Progress {
  last_id: string;
  target_id: string | null;
  finished_at: Date | null;
}

export interface BackfillRunner {
  /** Settles when every backfill has finished, or the runner was stopped. */
  done: Promise<void>;
  /** Stops after the batch under way (its transaction commits or rolls back whole). */
  stop(): Promise<void>;
}

/** Where a backfill stands after a batch: the last id it has passed, and the id it walks to. */
interface Position {
  lastId: number;
  targetId: number;
  finished: boolean;
}

/** Records the backfill's target, the table's last id now, unless a replica already has. */
async function begin(db: Database, backfill: Backfill): Promise<void> {
  await db.knex.raw(
    `INSERT INTO schema_backfills (name, target_id, started_at)
     SELECT ?, (SELECT coalesce(max(id), 0) FROM ??), now()
     ON CONFLICT (name) DO NOTHING`,
    [backfill.name, backfill.table],
  );
}

/** One batch in its own transaction: the progress row (locked), the rows after it, the progress written back. */
async function runBatch(db: Database, backfill: Backfill, counted: { rows: number }): Promise<Position> {
  return db.knex.transaction(async (trx) => {
    const progress = await trx<Progress>('schema_backfills')
      .select('last_id', 'target_id', 'finished_at')
      .where('name', backfill.name)
      .forUpdate()
      .first();
    if (!progress) throw new Error(`backfill ${backfill.name} has no progress row`);
    const from = Number(progress.last_id);
    const targetId = Number(progress.target_id ?? 0);
    if (progress.finished_at) return { lastId: from, targetId, finished: true };
    const to = Math.min(from + BACKFILL_BATCH_IDS, targetId);
    const rows = to > from ? await backfill.batch(trx, from, to) : 0;
    counted.rows += rows;
    await trx('schema_backfills')
      .where('name', backfill.name)
      .update({
        last_id: to,
        rows_done: trx.raw('rows_done + ?', [rows]),
        finished_at: to >= targetId ? trx.fn.now() : null,
      });
    return { lastId: to, targetId, finished: to >= targetId };
  });
}

/**
 * Runs the backfills this build ships, one after another, until each is finished (here or by
 * another replica). A failed batch (the database away, a time-out) is logged and tried again; it
 * never stops the service.
 */
export function startBackfills(
  db: Database,
  logger: Logger,
  backfills: Backfill[] = shipped,
): BackfillRunner {
  // An object, as stop() sets it where the compiler's flow analysis does not look.
  const run = { stopped: false };
  let wake: AbortController | undefined;
  const pause = async (ms: number) => {
    wake = new AbortController();
    await sleep(ms, undefined, { signal: wake.signal }).catch(() => undefined);
  };

  const runOne = async (backfill: Backfill) => {
    const started = Date.now();
    const counted = { rows: 0 };
    let reported = started;
    let retryMs = RETRY_MS;
    let begun = false;
    while (!run.stopped) {
      let position: Position;
      try {
        if (!begun) await begin(db, backfill);
        begun = true;
        position = await runBatch(db, backfill, counted);
        retryMs = RETRY_MS;
      } catch (error) {
        logger.warn({ ...errorWithHint(error), backfill: backfill.name }, 'backfill batch failed; retrying');
        await pause(retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_CAP_MS);
        continue;
      }
      if (position.finished) {
        logger.info(
          { backfill: backfill.name, rows: counted.rows, durationMs: Date.now() - started },
          'backfill finished',
        );
        return;
      }
      if (Date.now() - reported >= PROGRESS_EVERY_MS) {
        reported = Date.now();
        logger.info(
          {
            backfill: backfill.name,
            rows: counted.rows,
            lastId: position.lastId,
            targetId: position.targetId,
          },
          'backfill progress',
        );
      }
      await pause(PAUSE_MS);
    }
  };

  const done = (async () => {
    for (const backfill of backfills) {
      if (run.stopped) return;
      await runOne(backfill);
    }
  })();

  return {
    done,
    stop: async () => {
      run.stopped = true;
      wake?.abort();
      await done;
    },
  };
}

export interface BackfillState {
  name: string;
  pending: boolean;
  rowsDone: number;
}

/** Each shipped backfill's state in the database: pending until its row says finished. */
export async function backfillState(db: Database, backfills: Backfill[] = shipped): Promise<BackfillState[]> {
  const rows = await db
    .knex<{ name: string; rows_done: string; finished_at: Date | null }>('schema_backfills')
    .select('name', 'rows_done', 'finished_at');
  const byName = new Map(rows.map((row) => [row.name, row]));
  return backfills.map(({ name }) => {
    const row = byName.get(name);
    return { name, pending: !row?.finished_at, rowsDone: Number(row?.rows_done ?? 0) };
  });
}
