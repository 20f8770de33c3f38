/**
 * The parts of Kubernetes the local emulation needs, modelled after what they do on a cluster:
 * - kubelet: starts a replica with the rendered environment, runs the rendered startup, readiness
 *   and liveness probes against it directly (not through the proxy), sends SIGTERM on termination;
 * - endpoints controller + ingress-nginx's endpoint sync: the upstream holds the replicas that are
 *   ready and not terminating; a change rewrites nginx.conf and reloads it. A terminating replica
 *   leaves the upstream ENDPOINT_LAG_MS after its SIGTERM, because on a cluster the kubelet's
 *   SIGTERM and the controller's endpoint update race and the update arrives later;
 * - Deployment controller: a rollout replaces the replicas one by one with maxSurge 1 and
 *   maxUnavailable 0 (a new replica ready before an old one is terminated), with the pod
 *   template's image as it is (`rollout restart`) or changed to another (`set image`, an upgrade).
 * A liveness failureThreshold reached counts as a restart the kubelet would have made.
 */
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Launched, Launcher, MemoryUse } from './launcher';
import type { Release } from './release';
import { freePort } from '../../tools/harness/service';
import { probe, waitFor } from '../../tools/harness/poll';

const ENDPOINT_LAG_MS = 1000;

export interface Replica {
  name: string;
  port: number;
  /** Its METRICS_PORT (the Prometheus stand-in scrapes it). */
  metricsPort: number;
  /** Liveness failure thresholds reached: the restarts the kubelet would have made. */
  restarts: number;
  process: Launched;
  /** The pod template's image it was started from (unset: the launcher's default). */
  image?: string;
  ready: boolean;
  terminating: boolean;
}

export interface Address {
  host: string;
  port: number;
}

/** The settings that lead a replica to the runner's database and, when given, its read endpoint. */
export function databaseEnv(database: Address, read?: Address): Record<string, string> {
  return {
    DB_HOSTNAME: database.host,
    DB_PORT: String(database.port),
    ...(read ? { DB_READ_HOSTNAME: read.host, DB_READ_PORT: String(read.port) } : {}),
  };
}

export interface ClusterOptions {
  release: Release;
  /** Runs a replica: a container of the image, or a node process (launcher.ts). */
  launcher: Launcher;
  logDir: string;
  database: Address;
  /** The ro Pooler the replicas read from, when the release reads on standbys. */
  readDatabase?: Address;
  /** Called with the ready endpoints whenever they change; resolves when the proxy serves them. */
  onEndpoints: (endpoints: string[]) => Promise<void>;
  /** Called whenever a replica is added or removed (the Prometheus stand-in's targets). */
  onReplicas?: (replicas: Replica[]) => void;
  /** The pod template's image at the start (containers only; the launcher's default when unset). */
  image?: string;
}

export interface RolloutResult {
  replaced: { name: string; exit: number | string }[];
  /** The replicas that took their place. */
  started: string[];
}

/** Per replica: start to ready, and memory when it was stopped (or at the end). */
export interface ReplicaFigures {
  name: string;
  /** The replicas of the first start find an empty database and run the migrations. */
  database: 'empty' | 'migrated';
  /** The image it ran (containers). */
  image?: string;
  /** From the container's (or process's) start to its first passed readiness probe. */
  startToReadyMs: number;
  /** From asking the runtime to run it (image unpacked into a container first) to ready. */
  launchToReadyMs: number;
  memory?: MemoryUse;
  exit?: number | string;
}

export class Cluster {
  readonly replicas: Replica[] = [];
  restarts = 0;
  unexpectedExits: string[] = [];
  readonly figures = new Map<string, ReplicaFigures>();
  private counter = 0;
  private closed = false;
  private published = '';
  private publishing: Promise<void> = Promise.resolve();
  /** The Deployment's pod template image: what a replica starts from. */
  private image: string | undefined;

  constructor(private readonly options: ClusterOptions) {
    this.image = options.image;
  }

  /** The pod template's image now (unset: the launcher's default). */
  templateImage(): string | undefined {
    return this.image;
  }

  endpoints(): string[] {
    return this.replicas.filter((r) => r.ready && !r.terminating).map((r) => `127.0.0.1:${r.port}`);
  }

  /** Pushes the current endpoints to the proxy if they changed; serialised, like the controller's sync loop. */
  private publish(): Promise<void> {
    this.publishing = this.publishing.then(async () => {
      const endpoints = this.endpoints();
      const key = endpoints.join(',');
      if (key === this.published || this.closed) return;
      await this.options.onEndpoints(endpoints);
      this.published = key;
    });
    return this.publishing;
  }

  async startReplica(): Promise<Replica> {
    const { release } = this.options;
    const name = `replica-${++this.counter}`;
    // On one machine each replica needs ports of its own: every setting that names one of the
    // container's ports (PORT, METRICS_PORT…) gets a free one; PORT is the one the proxy uses.
    const env: Record<string, string> = { ...release.env };
    for (const [key, value] of Object.entries(release.env))
      if (release.containerPorts.includes(Number(value))) env[key] = String(await freePort());
    const port = Number(env.PORT);
    // The rendered database is the in-chart PostgreSQL's Service; here it is the runner's.
    Object.assign(env, databaseEnv(this.options.database, this.options.readDatabase));
    const firstStart = this.counter <= release.replicas;
    const launchedAt = Date.now();
    const image = this.image;
    const child = await this.options.launcher.launch({
      name,
      env,
      logFile: join(this.options.logDir, `${name}.log`),
      ...(image === undefined ? {} : { image }),
    });
    const replica: Replica = {
      name,
      port,
      metricsPort: Number(env.METRICS_PORT),
      restarts: 0,
      process: child,
      image,
      ready: false,
      terminating: false,
    };
    this.replicas.push(replica);
    this.options.onReplicas?.(this.replicas);
    void child.exited.then((code) => {
      replica.ready = false;
      if (!replica.terminating && !this.closed)
        this.unexpectedExits.push(`${name} exited with ${String(code)}`);
      void this.publish();
    });

    // Startup probe, then the readiness and liveness probes, as the kubelet runs them.
    const startup = release.startup;
    await waitFor(
      `${name} to pass its startup probe`,
      startup.periodSeconds * startup.failureThreshold * 1000,
      async () => {
        if (child.hasExited()) throw new Error(`${name} exited during start-up; see its log`);
        return (await probe(port, startup.path, startup.timeoutSeconds * 1000)).status === 200;
      },
    );
    void this.probeLoop(replica, 'readiness');
    void this.probeLoop(replica, 'liveness');
    await waitFor(`${name} to become ready`, 60_000, () => replica.ready, 50);
    this.figures.set(name, {
      name,
      database: firstStart ? 'empty' : 'migrated',
      image,
      startToReadyMs: Date.now() - child.startedAt(),
      launchToReadyMs: Date.now() - launchedAt,
    });
    return replica;
  }

  private async probeLoop(replica: Replica, kind: 'readiness' | 'liveness'): Promise<void> {
    const timing = kind === 'readiness' ? this.options.release.readiness : this.options.release.liveness;
    let failures = 0;
    let successes = 0;
    // The first probe runs at once (initialDelaySeconds 0), then every periodSeconds.
    while (!this.closed && !replica.process.hasExited()) {
      const { status } = await probe(replica.port, timing.path, timing.timeoutSeconds * 1000);
      const ok = status >= 200 && status < 400;
      failures = ok ? 0 : failures + 1;
      successes = ok ? successes + 1 : 0;
      if (kind === 'readiness') {
        if (!replica.ready && successes >= timing.successThreshold) {
          replica.ready = true;
          await this.publish();
        } else if (replica.ready && failures >= timing.failureThreshold) {
          replica.ready = false;
          await this.publish();
        }
      } else if (failures >= timing.failureThreshold && !replica.terminating) {
        // The kubelet would restart the container here; the emulation counts it (the suite asserts none).
        this.restarts++;
        replica.restarts++;
        failures = 0;
      }
      await sleep(timing.periodSeconds * 1000);
    }
  }

  /** SIGTERM (the kubelet) and, after the controller's lag, removal from the upstream. */
  async terminate(replica: Replica): Promise<number | string> {
    replica.terminating = true;
    this.recordMemory(replica);
    const exiting = replica.process.stop('SIGTERM', this.graceMs());
    await sleep(ENDPOINT_LAG_MS);
    await this.publish();
    const exit = await exiting;
    const figures = this.figures.get(replica.name);
    if (figures) figures.exit = exit;
    this.replicas.splice(this.replicas.indexOf(replica), 1);
    this.options.onReplicas?.(this.replicas);
    return exit;
  }

  /** SIGTERM to SIGKILL: the drain (delay + timeout, within terminationGracePeriodSeconds) and a margin. */
  private graceMs(): number {
    const { SHUTDOWN_DELAY_SECONDS: delay = '5', SHUTDOWN_TIMEOUT_SECONDS: timeout = '15' } =
      this.options.release.env;
    return (Number(delay) + Number(timeout)) * 1000 + 5000;
  }

  /**
   * `kubectl rollout restart` (no `image`) or `kubectl set image` (the template's image changed to
   * `image`), with maxSurge 1, maxUnavailable 0: one new replica ready, one old one out.
   */
  async rollout(image?: string): Promise<RolloutResult> {
    if (image !== undefined) this.image = image;
    const old = this.replicas.filter((r) => !r.terminating);
    const replaced: RolloutResult['replaced'] = [];
    const started: string[] = [];
    for (const replica of old) {
      started.push((await this.startReplica()).name);
      replaced.push({ name: replica.name, exit: await this.terminate(replica) });
    }
    return { replaced, started };
  }

  /** The peak figures are high-water marks: one reading before the stop holds the whole life. */
  recordMemory(replica: Replica): void {
    const figures = this.figures.get(replica.name);
    const memory = replica.process.memory();
    if (figures && memory) figures.memory = memory;
  }

  /** Tear-down: every replica stops by its own pid (SIGTERM, then SIGKILL after the drain time). */
  async close(): Promise<void> {
    this.closed = true;
    for (const replica of this.replicas) this.recordMemory(replica);
    await Promise.all(this.replicas.map((r) => r.process.stop('SIGTERM', this.graceMs())));
    await this.options.launcher.close();
  }
}
