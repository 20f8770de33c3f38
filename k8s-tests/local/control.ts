/**
 * The runner's control endpoint (K8S_CONTROL_URL): what suite/drivers.ts asks of the emulated
 * cluster that a kind run would ask of kubectl — stop, start or fail over the database, roll the
 * replicas out (or upgrade them to this release's image), read each replica's metrics, count
 * restarts, look inside a replica, run the image once without a database, put a misbehaving
 * endpoint beside the ready ones, and (CloudNativePG with the Barman Cloud plugin) take a base
 * backup, make an operator's mistake and recover a new Cluster. Plain HTTP on 127.0.0.1: `POST
 * /call/<method>` with the arguments as a JSON array answers the result as JSON; `standby.<method>`,
 * `backups.<method>` and `brokenEndpoint.<method>` reach those parts of the Driver.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { INSPECT_SCRIPT } from '../suite/inspect';
import type { BrokenEndpointControl, DatabaseControl } from '../suite/drivers';
import type { Cluster, RolloutResult } from './cluster';
import { ContainerLauncher, type Launcher } from './launcher';
import type { EmulatedProxy } from './nginx';
import { listenLocal } from '../../tools/harness/service';

export interface Controlled {
  /** What case 6 stops and starts, case 10 fails over, and cases 12 and 13 reach (CloudNativePG only). */
  database: DatabaseControl;
  cluster: Cluster;
  launcher: Launcher;
  /** The replicas' log folder: a rolled-out replica's log must show its graceful shutdown. */
  logDir: string;
  /** A replica's environment, for a single container of the image. */
  onceEnv: Record<string, string>;
  /** nginx, reloaded with the ready endpoints and the broken one beside them. */
  proxy: EmulatedProxy;
  step: (message: string) => void;
  /** When the replicas started from the previous release's image: that image and this release's. */
  upgrade?: { from: string; to: string };
}

type Methods = Record<string, ((...args: never[]) => unknown) | undefined>;

/** The replaced replicas, after checking each one shut down gracefully; throws otherwise. */
function checkedRollout(c: Controlled, { replaced }: RolloutResult): string {
  const text = replaced.map((r) => `${r.name} exit ${String(r.exit)}`).join(', ');
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

/** The replicas' and the proxy's part of the Driver; the database's is `database` itself. */
function ownMethods(c: Controlled): Methods {
  const { cluster, launcher, database } = c;
  /** The pod template's image changed from one release's to the other's, replica by replica. */
  const changeImage = async (back: boolean) => {
    if (!c.upgrade) throw new Error('the replicas did not start from the previous release (--no-upgrade)');
    const [from, to] = back ? [c.upgrade.to, c.upgrade.from] : [c.upgrade.from, c.upgrade.to];
    if (cluster.templateImage() !== from)
      throw new Error(`the Deployment runs ${cluster.templateImage() ?? 'the default image'}, not ${from}`);
    const result = await cluster.rollout(to);
    return { from, to, replaced: checkedRollout(c, result), started: result.started };
  };
  return {
    stopDatabase: () => database.stopDatabase(),
    startDatabase: () => database.startDatabase(),
    failover: () =>
      database.failover?.() ?? Promise.reject(new Error('no standby: the in-chart database is one instance')),
    // The container case: what the service's own process sees inside a running replica.
    inspectReplica: () => {
      const replica = cluster.replicas.find((r) => r.ready && !r.terminating);
      if (!replica) throw new Error('no ready replica');
      return launcher.exec(replica.name, ['node', '-e', INSPECT_SCRIPT]);
    },
    // The image as an operator might misconfigure it: no database address, so the embedded database.
    // The read endpoint goes too: with it alone the start stops on that setting instead.
    imageWithoutDatabase: () => {
      if (!(launcher instanceof ContainerLauncher))
        throw new Error('no image: the replicas run as processes');
      const env = { ...c.onceEnv };
      delete env.DB_HOSTNAME;
      delete env.DB_READ_HOSTNAME;
      delete env.DB_READ_PORT;
      return JSON.stringify(launcher.runOnce(env, 60_000));
    },
    rollout: async () => `replaced ${checkedRollout(c, await cluster.rollout())}`,
    // The upgrade case; the rollback case (`helm rollback` sets the pod template's image back).
    upgrade: () => changeImage(false),
    rollback: () => changeImage(true),
    // Each ready replica's own metrics page, as a scrape of its pod would read it.
    replicaMetrics: () =>
      Promise.all(
        cluster.replicas
          .filter((r) => r.ready && !r.terminating)
          .map(async (r) => {
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
      ),
    restarts: () => cluster.restarts + cluster.unexpectedExits.length,
    // Resolves once every endpoint change so far is in nginx and its old workers are gone: a reload
    // lets a new connection land on an old worker for a moment, which the real controller (no
    // reload for endpoints) never does, so case 6 waits for it before its next request.
    endpointsSettled: () => c.proxy.settled(),
  };
}

/** The retry cases' misbehaving endpoint beside the ready ones, put into nginx at once. */
function brokenEndpointControl(c: Controlled): BrokenEndpointControl {
  const { broken, reload } = c.proxy;
  return {
    open: async (mode) => {
      if (!['refuse', 'reset', 'hang'].includes(mode))
        throw new Error(`no broken-endpoint mode ${JSON.stringify(mode)}`);
      await broken.open(mode);
      await reload();
      c.step(
        `broken endpoint (${mode}) ${broken.endpoints().join('')} next to [${c.proxy.ready.join(', ')}]`,
      );
    },
    failures: () => Promise.resolve(broken.failures()),
    close: async () => {
      await broken.close();
      await reload();
    },
  };
}

/** Listens on a free port of 127.0.0.1; a method's failure answers 500 with its message. */
export async function startControlServer(c: Controlled): Promise<{ server: Server; url: string }> {
  const parts: Record<string, object | undefined> = {
    '': ownMethods(c),
    standby: c.database.standby,
    backups: c.database.backups,
    brokenEndpoint: brokenEndpointControl(c),
  };
  const server = createServer((req, res) => {
    const name = /^\/call\/([\w.]+)$/.exec(req.url ?? '')?.[1] ?? '';
    const [part = '', method = ''] = name.includes('.') ? name.split('.', 2) : ['', name];
    const owner = Object.hasOwn(parts, part) ? (parts[part] as Methods | undefined) : undefined;
    const fn = owner && Object.hasOwn(owner, method) ? owner[method] : undefined;
    if (req.method !== 'POST' || typeof fn !== 'function') {
      res.writeHead(404).end(`no ${name} here`);
      return;
    }
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    // A method that throws before its first await still answers 500.
    new Promise((resolveBody) => req.once('end', resolveBody))
      .then(() => {
        c.step(`control: ${name}`);
        return fn.apply(owner, (body ? JSON.parse(body) : []) as never[]);
      })
      .then(
        (result) => {
          c.step(`control: ${name} done ${JSON.stringify(result ?? null).slice(0, 300)}`);
          res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(result ?? null));
        },
        (error: unknown) => res.writeHead(500).end(String(error)),
      );
  });
  return { server, url: `http://127.0.0.1:${await listenLocal(server)}` };
}
