/**
 * The runner's control endpoint (K8S_CONTROL_URL): what suite/drivers.ts asks of the emulated
 * cluster that a kind run would ask of kubectl — stop, start or fail over the database, roll the
 * replicas out (or upgrade them to this release's image), read each replica's metrics, count
 * restarts, look inside a replica, run the image once without a database, put a misbehaving
 * endpoint beside the ready ones, and (CloudNativePG with the Barman Cloud plugin) take a base
 * backup, make an operator's mistake and recover a new Cluster. Plain HTTP on 127.0.0.1, one route
 * a verb; a route that takes input reads it as JSON from the request's body.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { INSPECT_SCRIPT } from '../suite/inspect';
import { brokenModes, type BrokenEndpoint } from './broken-endpoint';
import type { Cluster, RolloutResult } from './cluster';
import type { RecoveryReport } from './cnpg-backup';
import { ContainerLauncher, type Launcher } from './launcher';
import type { KubeObject } from '../../tools/harness/manifests';

/** What case 6 stops and starts, and case 8 fails over (CloudNativePG only). */
export interface DatabaseControl {
  stop(): Promise<void>;
  start(): Promise<void>;
  failover?: () => Promise<{ promotedAfterMs: number }>;
  /** Reads on standbys (the ro Pooler): the standby's replay paused or resumed, and where transactions committed. */
  standby?: {
    pauseReplay(paused: boolean): Promise<void>;
    committedOn(): Promise<{ primary: number; standby: number }>;
  };
  /** The Barman Cloud plugin's part (the backup case), when the Cluster archives through it. */
  backups?: {
    base(): Promise<{ backupId: string; name: string; ms: number }>;
    mistake(): Promise<{ before: string; deleted: number[] }>;
    recover(rendered: KubeObject[]): Promise<RecoveryReport>;
  };
}

export interface Controlled {
  database: DatabaseControl;
  /** How long after the primary's loss the stand-in promotes the standby; for the log. */
  failoverDetectionMs: number;
  cluster: Cluster;
  launcher: Launcher;
  /** The replicas' log folder: a rolled-out replica's log must show its graceful shutdown. */
  logDir: string;
  /** A replica's environment, for a single container of the image. */
  onceEnv: Record<string, string>;
  broken: BrokenEndpoint;
  /** Puts the ready endpoints and the broken one into nginx. */
  reload: () => Promise<void>;
  /** Resolves once every endpoint change so far is in nginx. */
  settled: () => Promise<void>;
  /** The ready endpoints, for the log. */
  ready: () => string[];
  step: (message: string) => void;
  /** When the replicas started from the previous release's image: that image and this release's. */
  upgrade?: { from: string; to: string };
}

type Routes = Record<string, (body: string) => Promise<string>>;

/** The replaced replicas, after checking each one shut down gracefully; throws otherwise. */
function checkedRollout(c: Controlled, { replaced }: RolloutResult): string {
  const text = replaced.map((r) => `${r.name} exit ${String(r.exit)}`).join(', ');
  c.step(`rollout done: ${text}`);
  // A replica that did not end its graceful shutdown with 0 was killed or crashed.
  if (replaced.some((r) => r.exit !== 0)) throw new Error(`rollout: ${text}`);
  // The SIGTERM reached the service itself (PID 1 in a container), which drained and said so.
  for (const { name } of replaced) {
    const log = readFileSync(join(c.logDir, `${name}.log`), 'utf8');
    if (!log.includes('shutdown started') || !log.includes('shutdown complete'))
      throw new Error(`rollout: ${name} exited without its graceful shutdown; see its log`);
  }
  return text;
}

/** The database's: stop, start, failover, a lagging standby. */
function databaseRoutes(c: Controlled): Routes {
  const { database, step } = c;
  const standby = () => {
    if (!database.standby) throw new Error('no ro Pooler: the release does not read on standbys');
    return database.standby;
  };
  return {
    'POST /database/stop': async () => {
      await database.stop();
      step('PostgreSQL stopped (fast shutdown)');
      return 'stopped';
    },
    'POST /database/start': async () => {
      await database.start();
      step('PostgreSQL started');
      return 'started';
    },
    'POST /database/failover': async () => {
      if (!database.failover) throw new Error('no standby: the in-chart database is one instance');
      step(`failover: primary killed; the standby promoted ${c.failoverDetectionMs} ms later`);
      const result = await database.failover();
      step(`failover: standby promoted and -rw moved to it ${result.promotedAfterMs} ms after the kill`);
      return JSON.stringify(result);
    },
    // The standby-reads case: a lagging standby, and which instance ran the transactions.
    'POST /database/standby/pause': async () => {
      await standby().pauseReplay(true);
      step('standby: replay paused (pg_wal_replay_pause)');
      return 'paused';
    },
    'POST /database/standby/resume': async () => {
      await standby().pauseReplay(false);
      step('standby: replay resumed');
      return 'resumed';
    },
    'GET /database/committed': async () => JSON.stringify(await standby().committedOn()),
  };
}

/** The backup case: the ScheduledBackup's base backup now, the mistake, the recovery Cluster. */
function backupRoutes({ database, step }: Controlled): Routes {
  const backups = () => {
    if (!database.backups) throw new Error('no backups: the Cluster has no Barman Cloud plugin entry');
    return database.backups;
  };
  return {
    // The backup case: the ScheduledBackup's base backup now, the mistake, the recovery Cluster.
    'POST /backup/base': async () => {
      const backup = await backups().base();
      step(`backup: base backup ${backup.backupId} (${backup.name}) in ${String(backup.ms)} ms`);
      return JSON.stringify(backup);
    },
    'POST /backup/mistake': async () => {
      const mistake = await backups().mistake();
      step(
        `backup: DELETE FROM posts in psql on the primary at ${mistake.before}: ${String(mistake.deleted.length)} rows`,
      );
      return JSON.stringify(mistake);
    },
    'POST /backup/recover': async (body) => {
      const rendered = JSON.parse(body) as unknown;
      if (!Array.isArray(rendered)) throw new Error('the body must be the rendered objects, a JSON array');
      step('backup: recovering the rendered recovery Cluster from the object store');
      const report = await backups().recover(rendered as KubeObject[]);
      step(
        `backup: ${report.cluster} recovered from ${report.sourceServerName} (backup ${report.backupId}) to ${String(report.targetTime)} in ${String(report.downloadMs + report.replayMs)} ms, archiving to ${report.serverName}; the -rw Service moved to it`,
      );
      return JSON.stringify(report);
    },
  };
}

/** The replicas': inside one, the image alone, rollouts and upgrades, metrics pages, restarts. */
function replicaRoutes(c: Controlled): Routes {
  const { cluster, launcher, step } = c;
  const checked = (result: RolloutResult) => checkedRollout(c, result);
  const releases = () => {
    if (!c.upgrade) throw new Error('the replicas did not start from the previous release (--no-upgrade)');
    return c.upgrade;
  };
  /** The pod template's image changed from one release's to the other's, replica by replica. */
  const changeImage = async (what: string, from: string, to: string): Promise<string> => {
    if (cluster.templateImage() !== from)
      throw new Error(`the Deployment runs ${cluster.templateImage() ?? 'the default image'}, not ${from}`);
    step(`${what}: image ${from} -> ${to}, replica by replica (maxSurge 1, maxUnavailable 0)`);
    const result = await cluster.rollout(to);
    return JSON.stringify({ from, to, replaced: checked(result), started: result.started });
  };
  return {
    // The container case: what the service's own process sees inside a running replica.
    'POST /replica/inspect': () => {
      const replica = cluster.replicas.find((r) => r.ready && !r.terminating);
      if (!replica) throw new Error('no ready replica');
      step(`inspect: node -e … inside ${replica.name}`);
      return Promise.resolve(launcher.exec(replica.name, ['node', '-e', INSPECT_SCRIPT]));
    },
    // The image as an operator might misconfigure it: no database address, so the embedded database.
    // The read endpoint goes too: with it alone the start stops on that setting instead.
    'POST /image/without-database': () => {
      if (!(launcher instanceof ContainerLauncher))
        throw new Error('no image: the replicas run as processes');
      const env = { ...c.onceEnv };
      delete env.DB_HOSTNAME;
      delete env.DB_READ_HOSTNAME;
      delete env.DB_READ_PORT;
      step('a container of the image without DB_HOSTNAME');
      return Promise.resolve(JSON.stringify(launcher.runOnce(env, 60_000)));
    },
    'POST /rollout': async () => {
      step('rollout: replacing the replicas one by one (maxSurge 1, maxUnavailable 0)');
      return `replaced ${checked(await cluster.rollout())}`;
    },
    // The upgrade case: the pod template's image changed to this release's, replica by replica.
    'POST /upgrade': async () => {
      const { from, to } = releases();
      return await changeImage('upgrade', from, to);
    },
    // The rollback case: `helm rollback` to the previous revision sets the pod template's image back.
    'POST /rollback': async () => {
      const { from, to } = releases();
      return await changeImage('rollback', to, from);
    },
    // Each ready replica's own metrics page, as a scrape of its pod would read it.
    'GET /replicas/metrics': async () => {
      const ready = cluster.replicas.filter((r) => r.ready && !r.terminating);
      const pages = await Promise.all(
        ready.map(async (r) => {
          const answer = await fetch(`http://127.0.0.1:${r.metricsPort}/metrics`, {
            signal: AbortSignal.timeout(10_000),
          });
          return {
            name: r.name,
            image: r.image ?? null,
            status: answer.status,
            metrics: await answer.text(),
          };
        }),
      );
      return JSON.stringify(pages);
    },
    'GET /restarts': () =>
      Promise.resolve(JSON.stringify({ restarts: cluster.restarts + cluster.unexpectedExits.length })),
  };
}

/** The proxy's: its endpoints settled, and the retry cases' misbehaving endpoint. */
function proxyRoutes(c: Controlled): Routes {
  const { broken, step } = c;
  const table: Routes = {
    // Resolves once every endpoint change so far is in nginx and its old workers are gone: a reload
    // lets a new connection land on an old worker for a moment, which the real controller (no
    // reload for endpoints) never does, so case 6 waits for it before its next request.
    'GET /endpoints/settled': async () => {
      await c.settled();
      return 'settled';
    },
    'GET /broken-endpoint': () => Promise.resolve(JSON.stringify({ failures: broken.failures() })),
    'DELETE /broken-endpoint': async () => {
      await broken.close();
      await c.reload();
      return 'closed';
    },
  };
  for (const mode of brokenModes)
    table[`POST /broken-endpoint/${mode}`] = async () => {
      await broken.open(mode);
      await c.reload();
      step(`broken endpoint (${mode}) ${broken.endpoints().join('')} next to [${c.ready().join(', ')}]`);
      return broken.endpoints().join('');
    };
  return table;
}

function routes(c: Controlled): Routes {
  return { ...replicaRoutes(c), ...databaseRoutes(c), ...backupRoutes(c), ...proxyRoutes(c) };
}

/** Listens on a free port of 127.0.0.1; a route's failure answers 500 with its message. */
export function startControlServer(controlled: Controlled): Promise<{ server: Server; url: string }> {
  const table = routes(controlled);
  const server = createServer((req, res) => {
    const route = table[`${req.method ?? ''} ${req.url ?? ''}`];
    if (!route) {
      res.writeHead(404).end();
      return;
    }
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    // A route that throws before its first await still answers 500.
    new Promise((resolveBody) => req.once('end', resolveBody))
      .then(() => route(body))
      .then(
        (answer) => res.writeHead(200).end(answer),
        (error: unknown) => res.writeHead(500).end(String(error)),
      );
  });
  return new Promise((resolvePromise) => {
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      resolvePromise({ server, url: `http://127.0.0.1:${port}` });
    });
  });
}
