/**
 * How the emulated kubelet runs a replica: as a container of the image (the default, what a
 * cluster runs) or as a node process from this checkout (`--processes`, for machines without a
 * container engine). The cluster model (cluster.ts) only sees this interface.
 *
 * Containers get what the rendered Deployment says, applied as kubelet + container runtime do:
 * runAsUser/runAsGroup (the container's securityContext over the pod's), fsGroup as a
 * supplementary group and owner of the volumes, runAsNonRoot checked, readOnlyRootFilesystem with
 * the rendered emptyDir mounts as the only writable paths (host folders, like a disk-backed
 * emptyDir; podman's own tmpfs mounts for a read-only root are turned off), capabilities dropped
 * and added as listed, no-new-privileges for allowPrivilegeEscalation false, the runtime's default
 * seccomp profile for RuntimeDefault, the memory limit (no swap), and the environment.
 * Networking is the host's: two replicas cannot share a port, so the runner gives each its own
 * PORT and METRICS_PORT (cluster.ts), as with processes.
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ISecurityContext } from 'kubernetes-models/v1/SecurityContext';
import { engine, IMAGE, runLimits } from '../../tools/container';
import { startLogged, stop, type Managed } from '../../tools/harness/processes';
import type { Release } from './release';

const execFileAsync = promisify(execFile);

export interface ReplicaSpec {
  name: string;
  env: Record<string, string>;
  logFile: string;
  /** The pod template's image (containers only); `IMAGE` when unset. */
  image?: string;
}

export interface MemoryUse {
  /** Peak resident set of the service's node process (VmHWM). */
  peakRssBytes: number;
  /** Peak of the container's memory cgroup (what the limit is enforced on); containers only. */
  cgroupPeakBytes?: number;
}

export interface Launched {
  exited: Promise<number | string>;
  hasExited(): boolean;
  /** The signal to the service (PID 1 in a container), then after graceMs a kill. */
  stop(signal: NodeJS.Signals, graceMs: number): Promise<number | string>;
  /** When the service process started (ms since the epoch). */
  startedAt(): number;
  memory(): MemoryUse | undefined;
}

export interface Launcher {
  kind: 'containers' | 'processes';
  /** For the proof table. */
  describe(): string;
  launch(spec: ReplicaSpec): Promise<Launched>;
  /** Runs a command inside a replica (containers only); its standard output. */
  exec(name: string, command: string[]): string;
  /** Removes whatever is left (tear-down). */
  close(): Promise<void>;
}

function readStatus(pid: number): MemoryUse | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const hwm = /^VmHWM:\s+(\d+) kB/m.exec(status)?.[1];
    return hwm ? { peakRssBytes: Number(hwm) * 1024 } : undefined;
  } catch {
    return undefined;
  }
}

/** Today's behaviour: the built service as a node process from this checkout. */
export class ProcessLauncher implements Launcher {
  readonly kind = 'processes';

  constructor(
    private readonly main: string,
    private readonly nodePath: string,
    private readonly cwd: string,
    /** Container path → host folder, for settings that name a file of a mounted Secret. */
    private readonly mounted: Record<string, string> = {},
  ) {}

  /** A setting naming a file under a mount points at the host's copy (a process has no mounts). */
  private hostEnv(env: Record<string, string>): Record<string, string> {
    const out = { ...env };
    for (const [key, value] of Object.entries(env))
      for (const [path, dir] of Object.entries(this.mounted))
        if (value.startsWith(`${path}/`)) out[key] = join(dir, value.slice(path.length + 1));
    return out;
  }

  describe(): string {
    return `processes: node ${process.version} running ${this.main} (no image, no pod security context)`;
  }

  launch(spec: ReplicaSpec): Promise<Launched> {
    if (spec.image !== undefined)
      throw new Error(`${spec.name}: image ${spec.image} asked for, but the replicas run as processes`);
    const child: Managed = startLogged(spec.name, process.execPath, [this.main], spec.logFile, {
      env: { ...this.hostEnv(spec.env), PATH: process.env.PATH ?? '/usr/bin:/bin', NODE_PATH: this.nodePath },
      cwd: this.cwd,
    });
    const startedAt = Date.now();
    return Promise.resolve({
      exited: child.exited,
      hasExited: () => child.hasExited(),
      stop: (signal, graceMs) => stop(child, signal, graceMs),
      startedAt: () => startedAt,
      memory: () => readStatus(child.pid),
    });
  }

  exec(): string {
    throw new Error('no container to exec into: the replicas run as processes (--processes)');
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** Kubernetes quantities the chart uses for memory: plain bytes, Ki/Mi/Gi, k/M/G. */
function memoryBytes(quantity: string | number): number {
  const match = /^(\d+(?:\.\d+)?)([KMGT]i?|k)?$/.exec(String(quantity));
  if (!match?.[1]) throw new Error(`memory quantity ${String(quantity)} is not modelled`);
  const factors: Record<string, number> = {
    '': 1,
    k: 1e3,
    K: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    Ki: 1024,
    Mi: 1024 ** 2,
    Gi: 1024 ** 3,
    Ti: 1024 ** 4,
  };
  return Math.round(Number(match[1]) * (factors[match[2] ?? ''] ?? 1));
}

export interface ContainerPolicy {
  user: number;
  group: number;
  supplementalGroups: number[];
  readOnlyRoot: boolean;
  noNewPrivileges: boolean;
  capDrop: string[];
  capAdd: string[];
  memoryLimitBytes?: number;
  /** Mounts: path in the container → volume; a Secret volume brings its files (name → content). */
  mounts: { path: string; volume: string; readOnly: boolean; files?: Record<string, Buffer> }[];
}

/**
 * Reads what the runtime must apply from the release's pod spec and API container; refuses what it
 * does not model. Its Secrets (name → key → content) fill the Secret volumes.
 */
export function containerPolicy(
  release: Pick<Release, 'podSpec' | 'container' | 'secrets'>,
): ContainerPolicy {
  const { podSpec, container, secrets } = release;
  const pod = podSpec.securityContext ?? {};
  const own: ISecurityContext = container.securityContext ?? {};
  const user = own.runAsUser ?? pod.runAsUser;
  const group = own.runAsGroup ?? pod.runAsGroup;
  if (user === undefined || group === undefined)
    throw new Error(
      'runAsUser/runAsGroup unset: the image USER would apply, which the runner does not model',
    );
  // The kubelet refuses to start a container that would run as root under runAsNonRoot.
  if ((own.runAsNonRoot ?? pod.runAsNonRoot) && user === 0)
    throw new Error('runAsNonRoot with runAsUser 0: the kubelet would not start this container');
  if (own.privileged) throw new Error('privileged containers are not modelled');
  const seccomp = own.seccompProfile?.type ?? pod.seccompProfile?.type ?? 'RuntimeDefault';
  if (seccomp !== 'RuntimeDefault') throw new Error(`seccomp ${seccomp} is not modelled`);
  const volumes = new Map((podSpec.volumes ?? []).map((v) => [v.name, v]));
  const mounts = (container.volumeMounts ?? []).map((mount) => {
    const volume = volumes.get(mount.name);
    const readOnly = mount.readOnly ?? false;
    if (volume?.secret?.secretName) {
      // The kubelet writes the listed keys (all keys without items) and the mount is read-only.
      const data = secrets[volume.secret.secretName];
      if (!data) throw new Error(`volume ${mount.name}: no Secret ${volume.secret.secretName}`);
      const items = volume.secret.items ?? Object.keys(data).map((key) => ({ key, path: key }));
      const files: Record<string, Buffer> = {};
      for (const { key, path } of items) {
        const content = data[key];
        if (!content)
          throw new Error(`volume ${mount.name}: Secret ${volume.secret.secretName} has no ${key}`);
        files[path] = content;
      }
      return { path: mount.mountPath, volume: mount.name, readOnly: true, files };
    }
    if (!volume?.emptyDir || volume.emptyDir.medium === 'Memory')
      throw new Error(`volume ${mount.name}: only disk-backed emptyDir and Secret volumes are modelled`);
    return { path: mount.mountPath, volume: mount.name, readOnly };
  });
  const memory = container.resources?.limits?.memory;
  return {
    user,
    group,
    supplementalGroups: [
      ...(pod.fsGroup !== undefined ? [pod.fsGroup] : []),
      ...(pod.supplementalGroups ?? []),
    ],
    readOnlyRoot: own.readOnlyRootFilesystem ?? false,
    // allowPrivilegeEscalation unset defaults to true unless privileged or CAP_SYS_ADMIN.
    noNewPrivileges: own.allowPrivilegeEscalation === false,
    capDrop: own.capabilities?.drop ?? [],
    capAdd: own.capabilities?.add ?? [],
    memoryLimitBytes: memory === undefined ? undefined : memoryBytes(memory),
    mounts,
  };
}

/** The image's containers, started and stopped the way the kubelet asks the runtime to. */
export class ContainerLauncher implements Launcher {
  readonly kind = 'containers';
  private readonly names = new Set<string>();
  private readonly prefix = `social-posts-k8s-${process.pid}`;

  constructor(
    private readonly policy: ContainerPolicy,
    private readonly workDir: string,
    private readonly image: { id: string; size: string; base: string },
    private readonly hosts: Record<string, string> = {},
  ) {}

  describe(): string {
    return `containers: ${IMAGE} ${this.image.id} (${this.image.size}; base ${this.image.base}), ${engine().name}`;
  }

  private engineArgs(args: string[]): [string, string[]] {
    const [command, ...rest] = [...engine().command, ...args];
    if (!command) throw new Error('no container engine');
    return [command, rest];
  }

  private engineRun(args: string[]): string {
    const [command, rest] = this.engineArgs(args);
    return execFileSync(command, rest, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** `podman run` arguments for the rendered pod; `env` as the kubelet assembled it. */
  runArgs(name: string, env: Record<string, string>, image = IMAGE): string[] {
    const p = this.policy;
    const args = ['run', '--rm', '--pull', 'never', '--name', name, '--network', 'host', ...runLimits()];
    // Service names the pod resolves through cluster DNS (the Pooler's), here to the host.
    for (const [host, address] of Object.entries(this.hosts)) args.push('--add-host', `${host}:${address}`);
    args.push('--user', `${p.user}:${p.group}`);
    for (const group of p.supplementalGroups) args.push('--group-add', String(group));
    // podman mounts tmpfs on /tmp, /var/tmp and /run of a read-only root by default; a pod gets none.
    if (p.readOnlyRoot) args.push('--read-only', '--read-only-tmpfs=false');
    for (const cap of p.capDrop) args.push('--cap-drop', cap);
    for (const cap of p.capAdd) args.push('--cap-add', cap);
    if (p.noNewPrivileges) args.push('--security-opt', 'no-new-privileges');
    if (p.memoryLimitBytes !== undefined)
      args.push('--memory', String(p.memoryLimitBytes), '--memory-swap', String(p.memoryLimitBytes));
    for (const mount of p.mounts) {
      // A disk-backed emptyDir: a fresh folder per pod, mode 0777, group fsGroup with setgid. A
      // Secret volume: its files, mode 0644 (the default), in such a folder mounted read-only.
      const dir = join(this.workDir, `${name}-${mount.volume}`);
      mkdirSync(dir, { recursive: true });
      for (const [file, content] of Object.entries(mount.files ?? {}))
        writeFileSync(join(dir, file), content, { mode: 0o644 });
      chmodSync(dir, 0o777);
      const fsGroup = p.supplementalGroups[0];
      if (fsGroup !== undefined) {
        chownSync(dir, 0, fsGroup);
        chmodSync(dir, 0o2777);
      }
      args.push('--volume', `${dir}:${mount.path}:${mount.readOnly ? 'ro' : 'rw'}`);
    }
    for (const [key, value] of Object.entries(env)) args.push('--env', `${key}=${value}`);
    args.push(image);
    return args;
  }

  async launch(spec: ReplicaSpec): Promise<Launched> {
    const name = `${this.prefix}-${spec.name}`;
    this.names.add(name);
    const [command, rest] = this.engineArgs(this.runArgs(name, spec.env, spec.image));
    // The engine's client stays attached: the container's output goes to the replica's log.
    const client = startLogged(spec.name, command, rest, spec.logFile);
    // Asynchronous: this process also relays the database's traffic (the -rw Service), and an
    // inspect waits for the engine's storage lock while another container is being created.
    const inspect = async (format: string): Promise<string | undefined> => {
      const [cmd, args] = this.engineArgs(['inspect', '--format', format, name]);
      try {
        return (await execFileAsync(cmd, args, { encoding: 'utf8' })).stdout.trim();
      } catch {
        return undefined;
      }
    };
    // Running once the engine reports a pid for the container's PID 1.
    let pid = 0;
    const deadline = Date.now() + 120_000;
    while (!pid && !client.hasExited() && Date.now() < deadline) {
      pid = Number((await inspect('{{.State.Pid}}')) ?? 0);
      if (!pid) await sleep(100);
    }
    if (!pid) throw new Error(`${spec.name}: the container did not start; see ${spec.logFile}`);
    // podman: "YYYY-MM-DD hh:mm:ss.nnnnnnnnn +0000 UTC", docker: RFC 3339; Date takes milliseconds.
    const started = ((await inspect('{{.State.StartedAt}}')) ?? '')
      .replace(/(\.\d{3})\d*/, '$1')
      .replace(/^(\S+) (\S+) ([+-]\d{2})(\d{2}) \S+$/, '$1T$2$3:$4');
    const startedAt = Date.parse(started);
    if (Number.isNaN(startedAt)) throw new Error(`${spec.name}: unreadable start time ${started}`);
    const cgroupPeak = (): number | undefined => {
      try {
        const cgroups = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
        const v1 = /^\d+:(?:[^:]*,)?memory(?:,[^:]*)?:(.*)$/m.exec(cgroups)?.[1];
        if (v1) return Number(readFileSync(`/sys/fs/cgroup/memory${v1}/memory.max_usage_in_bytes`, 'utf8'));
        const v2 = /^0::(.*)$/m.exec(cgroups)?.[1];
        if (v2) return Number(readFileSync(`/sys/fs/cgroup${v2}/memory.peak`, 'utf8'));
      } catch {
        // The container is gone.
      }
      return undefined;
    };
    const signal = async (name_: string, sig: string): Promise<void> => {
      const [cmd, args] = this.engineArgs(['kill', '--signal', sig, name_]);
      // A container already gone is no error here: its exit is what the caller waits for.
      await execFileAsync(cmd, args).catch(() => undefined);
    };
    return {
      exited: client.exited,
      hasExited: () => client.hasExited(),
      // The kubelet's StopContainer: the runtime signals PID 1, then kills after the grace period.
      stop: async (sig, graceMs) => {
        if (client.hasExited()) return client.exited;
        await signal(name, sig);
        const result = await Promise.race([client.exited, sleep(graceMs).then(() => undefined)]);
        if (result !== undefined) return result;
        await signal(name, 'KILL');
        return client.exited;
      },
      startedAt: () => startedAt,
      memory: () => {
        const status = readStatus(pid);
        return status && { ...status, cgroupPeakBytes: cgroupPeak() };
      },
    };
  }

  exec(replica: string, command: string[]): string {
    return this.engineRun(['exec', `${this.prefix}-${replica}`, ...command]);
  }

  /** A one-off container of the image with this pod's settings (e.g. a start-up failure), its exit and output. */
  runOnce(env: Record<string, string>, timeoutMs: number): { status: number | null; output: string } {
    const name = `${this.prefix}-once`;
    this.names.add(name);
    const [command, rest] = this.engineArgs(this.runArgs(name, env));
    const result = spawnSync(command, rest, { encoding: 'utf8', timeout: timeoutMs });
    return { status: result.status, output: `${result.stdout}${result.stderr}` };
  }

  close(): Promise<void> {
    for (const name of this.names) {
      const [command, rest] = this.engineArgs(['rm', '--force', '--ignore', '--time', '0', name]);
      spawnSync(command, rest, { stdio: 'ignore' });
    }
    return Promise.resolve();
  }
}
