/**
 * What the suite asks of the platform for cases 6 and 7, one implementation per target
 * (K8S_DRIVER): `local` calls the runner's control endpoint (K8S_CONTROL_URL), which owns the
 * processes; `kind` runs kubectl against the release (K8S_NAMESPACE, K8S_RELEASE, KUBECTL,
 * K8S_KUBE_CONTEXT); `none` has no hold on the platform (skaffold verify's Job): the cases that
 * need one are skipped.
 */
import { execFile } from 'node:child_process';
import { request } from 'node:http';
import type { RecoveryReport } from '../local/cnpg-backup';
import type { KubeObject } from '../../tools/harness/manifests';
import { INSPECT_SCRIPT } from './inspect';

export interface Driver {
  name: string;
  /** Set when the driver can only watch through HTTP: the cases that act on the platform skip. */
  httpOnly?: true;
  /** Returns once the database is down (its process or pod is gone). */
  stopDatabase(): Promise<void>;
  /** Returns once the database accepts connections again. */
  startDatabase(): Promise<void>;
  /** Replaces every API replica the way a rollout does; returns once the rollout has finished. */
  rollout(): Promise<string>;
  /** Container restarts of the API so far (liveness failures, crashes). */
  restarts(): Promise<number>;
  /** Returns once the proxy routes by the current endpoints (every change applied everywhere). */
  endpointsSettled(): Promise<void>;
  /** INSPECT_SCRIPT's output from inside a running API container. */
  inspectReplica(): Promise<string>;
  /** A container of the image with the pod's settings but no DB_HOSTNAME: `{status, output}` as JSON. */
  imageWithoutDatabase(): Promise<string>;
  /**
   * The upgrade case (local runner, replicas started from the previous release's image): the
   * Deployment's image changed to this release's and rolled out; returns once that has finished.
   */
  upgrade?: () => Promise<{ replaced: string }>;
  /** The rollback case: the Deployment's image set back to the previous release's and rolled out. */
  rollback?: () => Promise<{ replaced: string }>;
  /** Each ready replica's metrics page and image (local runner only). */
  replicaMetrics?: () => Promise<ReplicaMetrics[]>;
  /** A misbehaving third endpoint of the API Service (retry cases); only the local runner has one. */
  brokenEndpoint?: BrokenEndpointControl;
  /**
   * CloudNativePG only (K8S_DATABASE=cnpg): the primary's pod killed mid-load; returns once that is
   * done, leaving promotion and the -rw Service's move to the operator (the local stand-in does
   * both at once). Undefined for the in-chart database, which has no standby.
   */
  failover?: () => Promise<void>;
  /**
   * The Barman Cloud plugin's part (local runner, K8S_BACKUP=plugin): the ScheduledBackup's base
   * backup taken now, an operator's mass delete in psql, and the recovery Cluster of the rendered
   * objects made from the store, with the service moved onto it.
   */
  backups?: BackupControl;
  /**
   * Reads on standbys (local runner with the ro Pooler, K8S_STANDBY_READS=1): the standby's replay
   * paused or resumed, and the transactions each instance has committed in the application database.
   */
  standby?: StandbyControl;
}

export interface StandbyControl {
  pauseReplay(paused: boolean): Promise<void>;
  committed(): Promise<{ primary: number; standby: number }>;
}

export interface BackupControl {
  base(): Promise<{ backupId: string; name: string; ms: number }>;
  mistake(): Promise<{ before: string; deleted: number[] }>;
  recover(rendered: KubeObject[]): Promise<RecoveryReport>;
}

export interface ReplicaMetrics {
  name: string;
  image: string | null;
  status: number;
  metrics: string;
}

export interface BrokenEndpointControl {
  /** refuse: nothing listens; reset: closes after reading the request; hang: never answers. */
  open(mode: 'refuse' | 'reset' | 'hang'): Promise<void>;
  /** The proxy's error-log lines about that endpoint since it was opened (each names its request). */
  failures(): Promise<string[]>;
  close(): Promise<void>;
}

/** The runner's method `name` called with `args` (local/control.ts); resolves with its result. */
function call(base: string, name: string, args: unknown[]): Promise<unknown> {
  return new Promise((resolvePromise, reject) => {
    const url = new URL(`/call/${name}`, base);
    const req = request(url, { method: 'POST', agent: false, timeout: 300_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        if (res.statusCode === 200) resolvePromise(JSON.parse(body));
        else reject(new Error(`runner control ${name}: ${String(res.statusCode)} ${body}`));
      });
    });
    req.on('timeout', () => req.destroy(new Error(`runner control ${name}: no answer`)));
    req.on('error', reject);
    req.end(JSON.stringify(args));
  });
}

const cnpg = process.env.K8S_DATABASE === 'cnpg';

function localDriver(): Driver {
  const base = process.env.K8S_CONTROL_URL;
  if (!base) throw new Error('K8S_CONTROL_URL is not set (the local runner sets it)');
  /** The named methods, each calling the runner's method of that name (after `prefix`); no other member. */
  const calls = <K extends string>(prefix: string, names: readonly K[]) =>
    Object.fromEntries(
      names.map((name) => [name, (...args: unknown[]) => call(base, `${prefix}${name}`, args)]),
    ) as Record<K, (...args: unknown[]) => Promise<never>>;
  return {
    name: 'local',
    ...calls('', [
      'stopDatabase',
      'startDatabase',
      'rollout',
      'restarts',
      'endpointsSettled',
      'inspectReplica',
      'imageWithoutDatabase',
      'upgrade',
      'rollback',
      'replicaMetrics',
    ]),
    ...(cnpg ? calls('', ['failover']) : {}),
    backups:
      process.env.K8S_BACKUP === 'plugin' ? calls('backups.', ['base', 'mistake', 'recover']) : undefined,
    standby:
      process.env.K8S_STANDBY_READS === '1' ? calls('standby.', ['pauseReplay', 'committed']) : undefined,
    brokenEndpoint: calls('brokenEndpoint.', ['open', 'failures', 'close']),
  };
}

function kubectl(args: string[]): Promise<string> {
  const bin = process.env.KUBECTL ?? 'kubectl';
  return new Promise((resolvePromise, reject) => {
    execFile(bin, args, { timeout: 600_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`kubectl ${args.join(' ')}: ${stderr || error.message}`));
      else resolvePromise(stdout);
    });
  });
}

function kindDriver(): Driver {
  const namespace = process.env.K8S_NAMESPACE ?? 'social-posts-dev';
  const release = process.env.K8S_RELEASE ?? 'social-posts';
  const context = process.env.K8S_KUBE_CONTEXT;
  const ns = [...(context ? ['--context', context] : []), '--namespace', namespace];
  const instance = `app.kubernetes.io/instance=${release}`;
  /** Returns once no pod matches the selector (the database's are gone). */
  const podsGone = async (selector: string, timeout: string) => {
    await kubectl([...ns, 'wait', '--for=delete', 'pod', '--selector', selector, `--timeout=${timeout}`]);
  };
  // CloudNativePG's Cluster of the release (values-e2e-cnpg.yaml): <release>-db.
  const cluster = `${release}-db`;
  const cnpgDatabase = {
    // Declarative hibernation: the instances' pods go, their volumes stay (docs/src/declarative_hibernation.md).
    stopDatabase: async () => {
      await kubectl([...ns, 'annotate', 'cluster', cluster, 'cnpg.io/hibernation=on', '--overwrite']);
      await podsGone(`cnpg.io/cluster=${cluster}`, '300s');
    },
    startDatabase: async () => {
      await kubectl([...ns, 'annotate', 'cluster', cluster, 'cnpg.io/hibernation=off', '--overwrite']);
      await kubectl([...ns, 'wait', '--for=condition=Ready', `cluster/${cluster}`, '--timeout=600s']);
    },
    // The primary's pod deleted without grace, as a lost node ends it; the operator promotes a
    // standby and moves the -rw Service, which the Pooler dials.
    failover: async () => {
      const primary = (
        await kubectl([...ns, 'get', 'cluster', cluster, '--output', 'jsonpath={.status.currentPrimary}'])
      ).trim();
      await kubectl([...ns, 'delete', 'pod', primary, '--grace-period=0', '--force', '--wait=false']);
    },
  };
  const inChartDatabase = {
    stopDatabase: async () => {
      await kubectl([...ns, 'scale', `statefulset/${release}-postgresql`, '--replicas=0']);
      await podsGone(`${instance},app.kubernetes.io/component=database`, '180s');
    },
    startDatabase: async () => {
      await kubectl([...ns, 'scale', `statefulset/${release}-postgresql`, '--replicas=1']);
      await kubectl([...ns, 'rollout', 'status', `statefulset/${release}-postgresql`, '--timeout=300s']);
    },
  };
  return {
    name: 'kind',
    ...(cnpg ? cnpgDatabase : inChartDatabase),
    rollout: async () => {
      await kubectl([...ns, 'rollout', 'restart', `deployment/${release}`]);
      return kubectl([...ns, 'rollout', 'status', `deployment/${release}`, '--timeout=300s']);
    },
    // ingress-nginx's Lua balancer takes endpoint changes without a reload: nothing to wait for.
    // NGINX Gateway Fabric does reload, and its old workers cannot be seen from here: on that path
    // a request right after an endpoint change can meet the same window as on a real cluster.
    endpointsSettled: () => Promise.resolve(),
    restarts: async () => {
      const out = await kubectl([
        ...ns,
        'get',
        'pods',
        '--selector',
        `${instance},app.kubernetes.io/component=api`,
        '--output',
        'jsonpath={.items[*].status.containerStatuses[*].restartCount}',
      ]);
      return out
        .split(/\s+/)
        .filter((n) => n !== '')
        .reduce((sum, n) => sum + Number(n), 0);
    },
    inspectReplica: () =>
      kubectl([...ns, 'exec', `deployment/${release}`, '--', 'node', '-e', INSPECT_SCRIPT]),
    // The image's start-up refusal is shown by the local runner, which owns the image.
    imageWithoutDatabase: () => Promise.reject(new Error('the local runner shows this case (k8s:local)')),
  };
}

function noDriver(): Driver {
  const refuse = () => Promise.reject(new Error('K8S_DRIVER=none cannot act on the platform'));
  return {
    name: 'none',
    httpOnly: true,
    stopDatabase: refuse,
    startDatabase: refuse,
    rollout: refuse,
    restarts: refuse,
    endpointsSettled: refuse,
    inspectReplica: refuse,
    imageWithoutDatabase: refuse,
  };
}

export function driverFromEnv(): Driver {
  const name = process.env.K8S_DRIVER ?? 'local';
  if (name === 'local') return localDriver();
  if (name === 'kind') return kindDriver();
  if (name === 'none') return noDriver();
  throw new Error(`K8S_DRIVER must be local, kind or none, not ${name}`);
}

/** What the runner can do to the database the replicas use: stop and start it, and the stand-in's extras. */
export interface DatabaseControl {
  stopDatabase(): void | Promise<void>;
  startDatabase(): void | Promise<void>;
  failover?: () => Promise<{ promotedAfterMs: number }>;
  standby?: StandbyControl;
  backups?: BackupControl;
}
