/**
 * The backup and point-in-time-recovery drill with the real parts: a primary archiving
 * its WAL into an S3-compatible store with barman-cloud-wal-archive, base backups with
 * barman-cloud-backup, recovery into a new server with barman-cloud-restore and
 * barman-cloud-wal-restore, the service under write load through real HTTP. Used by
 * tests/reliability/backup.test.ts and tools/bench/backup.ts; every setting is a parameter, so a harness that
 * reads them from the rendered chart can drive it too.
 */
import { rmSync } from 'node:fs';
import {
  archiveNow,
  archivingSettings,
  massDelete,
  recoverServer,
  splitDestination,
  storedBytes,
  takeBaseBackup,
  type BarmanSettings,
  type Compression,
  type RecoveryRun,
} from './barman';
import { ObjectStore } from './object-store';
import { OwnPostgres, queryServer } from './postgres';
import { account, call, login, vote, waitForStatus } from './client';
import { untilStopped } from './traffic';
import type { ServiceProcess } from './service';
import { shownVotes, VOTE_COUNTS, type VoteCount } from './vote-counts';

export interface DrillSettings {
  /** The primary's archive_timeout, in PostgreSQL's syntax ("60s", "5min"). */
  archiveTimeout: string;
  /** The ObjectStore's destinationPath: s3://<bucket>/<folder>. */
  destinationPath: string;
  /** The folder of this cluster's backups and WAL under destinationPath. */
  serverName: string;
  walCompression?: Compression;
  dataCompression?: Compression;
  jobs?: number;
  immediateCheckpoint?: boolean;
  log?: (line: string) => void;
}

/** One query on a server of the drill, on a connection of its own. */
export const query = queryServer;

export interface Recovered extends RecoveryRun {
  server: OwnPostgres;
}

export class BackupDrill {
  readonly store: ObjectStore;
  readonly primary: OwnPostgres;
  readonly barman: BarmanSettings;
  private readonly recovered: OwnPostgres[] = [];
  private readonly log: (line: string) => void;

  constructor(readonly settings: DrillSettings) {
    this.store = new ObjectStore(splitDestination(settings.destinationPath).bucket);
    // The credentials reach the server (and so archive_command) by its environment only.
    this.primary = new OwnPostgres({ env: this.store.env });
    this.barman = {
      destinationPath: settings.destinationPath,
      endpointUrl: '',
      serverName: settings.serverName,
      ...(settings.walCompression ? { walCompression: settings.walCompression } : {}),
      ...(settings.dataCompression ? { dataCompression: settings.dataCompression } : {}),
      ...(settings.jobs === undefined ? {} : { jobs: settings.jobs }),
      ...(settings.immediateCheckpoint ? { immediateCheckpoint: true } : {}),
    };
    this.log = settings.log ?? (() => undefined);
  }

  /** The store and a primary archiving into it (or, with `archiving` false, not yet: startArchiving). */
  async start(archiving = true): Promise<void> {
    this.barman.endpointUrl = await this.store.start();
    await this.primary.init();
    if (archiving) this.primary.configure(archivingSettings(this.barman, this.settings.archiveTimeout));
    this.primary.start();
    this.log(`store at ${this.barman.endpointUrl}, primary on port ${String(this.primary.port)}`);
  }

  /** The primary restarted archiving (archive_mode takes a restart). */
  startArchiving(): void {
    this.primary.stop();
    this.primary.configure(archivingSettings(this.barman, this.settings.archiveTimeout));
    this.primary.start();
  }

  /** A base backup of the primary with barman-cloud-backup; resolves with its id once it is in the store. */
  async baseBackup(): Promise<{ backupId: string; ms: number; bytes: number }> {
    const { backup, ms } = await takeBaseBackup(this.barman, this.store.env, {
      host: this.primary.dir,
      port: this.primary.port,
    });
    this.log(`base backup ${backup.backup_id} in ${String(ms)} ms`);
    return { backupId: backup.backup_id, ms, bytes: this.stored('base') };
  }

  /** Closes the current WAL segment and waits until the archiver has shipped it. */
  async archiveNow(withinMs = 60_000): Promise<string> {
    const wal = await archiveNow(this.primary.port, withinMs);
    this.log(`${wal} archived`);
    return wal;
  }

  /** An operator's mistake through psql on the primary, every post deleted; resolves with the moment just before it and the ids. */
  mistake(database: string): Promise<{ before: Date; deleted: number[] }> {
    return massDelete({ host: this.primary.dir, port: this.primary.port }, database, 'posts');
  }

  /** The primary's node gone without warning: every process of the server killed, its data folder removed. */
  loseThePrimary(): void {
    this.primary.kill();
    rmSync(this.primary.data, { recursive: true, force: true });
  }

  /**
   * A new server on a new port and data folder from the backup `backupId`: to `target` (then
   * promoted), or to the end of the archived WAL.
   */
  async recover(backupId: string, target?: Date, withinMs = 3_600_000): Promise<Recovered> {
    const server = new OwnPostgres({ env: this.store.env });
    this.recovered.push(server);
    await server.reserve();
    const run = await recoverServer(server, {
      source: this.barman,
      backupId,
      env: this.store.env,
      ...(target ? { target } : {}),
      withinMs,
    });
    this.log(
      `recovered into port ${String(server.port)}: download ${String(run.downloadMs)} ms, replay ${String(run.replayMs)} ms`,
    );
    return { server, ...run };
  }

  /** Bytes in the store of this server's base backups or WAL. */
  stored(what: 'base' | 'wals'): number {
    return storedBytes(this.store, this.barman, what);
  }

  async destroy(): Promise<void> {
    for (const server of this.recovered) server.destroy();
    this.primary.destroy();
    await this.store.destroy();
  }
}

/** One acknowledged write of the load: when it was sent and when its 201 came back. */
export type Write =
  | { kind: 'post'; id: number; email: string; sentAt: number; ackAt: number }
  | { kind: 'vote'; postId: number; email: string; sentAt: number; ackAt: number };

export interface WriteLoad {
  writes: Write[];
  /** Answers other than 201 and requests without an answer. */
  failed: number;
  stop(): Promise<void>;
}

/**
 * Registered users, one worker each, creating a post and then voting on a post of anyone's they
 * have not voted on yet, one request after another, until stopped; every 201 is recorded.
 */
export async function writeLoad(base: string, workers: number, label: string): Promise<WriteLoad> {
  const users = await Promise.all(
    Array.from({ length: workers }, async (_, n) => {
      const email = `${label}-${String(n)}@example.com`;
      return { email, token: await account(base, email), voted: new Set<number>() };
    }),
  );
  const writes: Write[] = [];
  const posts: number[] = [];
  // A failed write throws: counted, and (a database that is gone answers at once) followed by a pause.
  const worker = (user: (typeof users)[number]) => async (i: number) => {
    const sentAt = Date.now();
    if (i % 2 === 0) {
      const answer = await call(base, '/posts/', {
        token: user.token,
        json: { title: `${label} ${user.email} #${String(i)}`, content: 'drill' },
        timeoutMs: 10_000,
      });
      if (answer.status !== 201) throw new Error(String(answer.status));
      const id = (answer.body as { id: number }).id;
      writes.push({ kind: 'post', id, email: user.email, sentAt, ackAt: Date.now() });
      posts.push(id);
    } else {
      const choices = posts.slice(-50).filter((id) => !user.voted.has(id));
      const postId = choices[Math.floor(Math.random() * choices.length)];
      if (postId === undefined) return;
      user.voted.add(postId);
      const answer = await vote(base, user.token, postId, 1, 10_000);
      if (answer.status !== 201) throw new Error(String(answer.status));
      writes.push({ kind: 'vote', postId, email: user.email, sentAt, ackAt: Date.now() });
    }
  };
  const run = untilStopped(users.map(worker));
  return {
    writes,
    get failed() {
      return run.failures.length;
    },
    stop: run.stop,
  };
}

/** What a recovered database holds of the acknowledged writes, read in SQL. */
export async function presentWrites(
  port: number,
  database: string,
  writes: readonly Write[],
): Promise<Set<Write>> {
  const postIds = writes.flatMap((w) => (w.kind === 'post' ? [w.id] : []));
  const votePostIds = writes.flatMap((w) => (w.kind === 'vote' ? [w.postId] : []));
  const posts = new Set(
    (
      await query<{ id: number }>(port, database, 'SELECT id FROM posts WHERE id = ANY($1::int[])', [postIds])
    ).map((r) => r.id),
  );
  const votes = new Set(
    (
      await query<{ key: string }>(
        port,
        database,
        `SELECT u.email || ':' || v.post_id AS key FROM votes v JOIN users u ON u.id = v.user_id
         WHERE v.post_id = ANY($1::int[])`,
        [votePostIds],
      )
    ).map((r) => r.key),
  );
  return new Set(
    writes.filter((w) => (w.kind === 'post' ? posts.has(w.id) : votes.has(`${w.email}:${String(w.postId)}`))),
  );
}

/** Posts whose stored vote count differs from their votes rows. */
export async function countMismatches(port: number, database: string): Promise<number> {
  const [row] = await query<{ n: number }>(
    port,
    database,
    `SELECT count(*)::int AS n FROM (${VOTE_COUNTS}) v WHERE coalesce(v.stored, 0) <> v.rows`,
  );
  return row?.n ?? -1;
}

/**
 * Through the API of a service on the recovered database: posts that do not answer 200 to their
 * author, and posts whose shown vote count is not their number of votes rows.
 */
export async function apiFindings(
  svc: ServiceProcess,
  port: number,
  database: string,
  writes: readonly Write[],
  sample: number,
): Promise<{ checked: number; notShown: number[]; wrongCounts: number[] }> {
  const posts = writes.flatMap((w) => (w.kind === 'post' ? [w] : [])).slice(-sample);
  const tokens = new Map<string, string>();
  for (const { email } of posts) if (!tokens.has(email)) tokens.set(email, await login(svc.base, email));
  const authors = new Map(posts.map((p) => [p.id, tokens.get(p.email) ?? '']));
  const shown = await shownVotes(svc.base, [...authors.keys()], (id) => authors.get(id) ?? '');
  const counts = await query<VoteCount>(port, database, `${VOTE_COUNTS} WHERE p.id = ANY($1::int[])`, [
    [...shown.keys()],
  ]);
  const rows = new Map(counts.map((c) => [c.id, c.rows]));
  const notShown = [...shown].filter(([, votes]) => typeof votes === 'string').map(([id]) => id);
  const wrongCounts = [...shown]
    .filter(([id, votes]) => typeof votes === 'number' && rows.get(id) !== votes)
    .map(([id]) => id);
  return { checked: posts.length, notShown, wrongCounts };
}

/** Starts a service on a recovered server and measures start to ready. */
export async function serveRecovered(
  start: (port: number) => Promise<ServiceProcess>,
  port: number,
): Promise<{ svc: ServiceProcess; readyMs: number }> {
  const started = Date.now();
  const svc = await start(port);
  const status = (await waitForStatus(svc.base, '/healthz/ready', 200, 120_000))?.status ?? 0;
  if (status !== 200) throw new Error(`the service on the recovered server was not ready: ${String(status)}`);
  return { svc, readyMs: Date.now() - started };
}

export interface Loss {
  acknowledged: number;
  lost: Write[];
  /** The newest acknowledged write that was recovered, and the newest lost (ms since the epoch). */
  newestRecoveredAt: number | null;
  newestLostAt: number | null;
  /** From the newest recovered write to the newest lost: the writes' span the loss took, in s. */
  rpoSeconds: number;
  /** Lost writes acknowledged before the last replayed commit: must be none. */
  lostBeforeLastReplayed: Write[];
}

/** What the loss of the primary cost, from the record of acknowledged writes and what recovery holds. */
export function lossOf(writes: readonly Write[], present: Set<Write>, lastReplayed: Date | null): Loss {
  const lost = writes.filter((w) => !present.has(w));
  const newest = (list: readonly Write[]) =>
    list.length === 0 ? null : Math.max(...list.map((w) => w.ackAt));
  const newestRecoveredAt = newest(writes.filter((w) => present.has(w)));
  const newestLostAt = newest(lost);
  const replayedAt = lastReplayed?.getTime() ?? -Infinity;
  return {
    acknowledged: writes.length,
    lost,
    newestRecoveredAt,
    newestLostAt,
    rpoSeconds:
      newestLostAt === null
        ? 0
        : (newestLostAt - (newestRecoveredAt ?? Math.min(...lost.map((w) => w.sentAt)))) / 1000,
    lostBeforeLastReplayed: lost.filter((w) => w.ackAt <= replayedAt),
  };
}
