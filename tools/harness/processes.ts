/**
 * The one registry of child processes every harness starts: the service and scripts of
 * tools/harness/service.ts, and PostgreSQL, nginx, Prometheus and the API replicas of k8s-tests/local.
 * Each is tracked from its start until it exits, and stopped by its own pid, never by name.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Managed {
  name: string;
  child: ChildProcess;
  pid: number;
  /** Resolves with the exit code (or the signal's name) when the process has ended. */
  exited: Promise<number | string>;
  hasExited: () => boolean;
}

const running = new Set<Managed>();

/** Tracks a child just spawned until it exits; throws if it did not start (no pid). */
export function track(name: string, child: ChildProcess): Managed {
  if (child.pid === undefined) {
    // Its 'error' event (ENOENT, say) follows; this throw reports it instead of a crash.
    child.once('error', () => undefined);
    throw new Error(`${name}: could not start ${child.spawnfile}`);
  }
  let done = false;
  const exited = new Promise<number | string>((resolvePromise) => {
    child.once('exit', (code, signal) => {
      done = true;
      resolvePromise(code ?? signal ?? 'unknown');
    });
    child.once('error', () => {
      done = true;
      resolvePromise('spawn error');
    });
  });
  const managed: Managed = { name, child, pid: child.pid, exited, hasExited: () => done };
  running.add(managed);
  void exited.then(() => running.delete(managed));
  return managed;
}

/** Starts a process with its output appended to a log file; it is tracked until it exits. */
export function startLogged(
  name: string,
  command: string,
  args: string[],
  logFile: string,
  options: SpawnOptions = {},
): Managed {
  const fd = openSync(logFile, 'a');
  try {
    return track(name, spawn(command, args, { ...options, stdio: ['ignore', fd, fd] }));
  } finally {
    closeSync(fd);
  }
}

/** Sends a signal to the process by its pid and waits; after graceMs it is killed. */
export async function stop(
  managed: Managed,
  signal: NodeJS.Signals,
  graceMs: number,
): Promise<number | string> {
  if (managed.hasExited()) return managed.exited;
  process.kill(managed.pid, signal);
  // The grace timer is cancelled once the process is gone, so it never outlives the caller (jest).
  const grace = new AbortController();
  const result = await Promise.race([
    managed.exited,
    sleep(graceMs, undefined, { signal: grace.signal }).then(
      () => undefined,
      () => undefined,
    ),
  ]);
  grace.abort();
  if (result !== undefined) return result;
  if (!managed.hasExited()) process.kill(managed.pid, 'SIGKILL');
  return managed.exited;
}

/** Everything still running, newest first (replicas before the database and the proxy). */
export function stillRunning(): Managed[] {
  return [...running].reverse();
}

/** Kills every process still running (SIGKILL, by pid) and waits until each has exited. */
export async function stopAll(): Promise<void> {
  const left = stillRunning();
  // child.kill: a no-op for a process already reaped, whose pid may be another's by now.
  for (const managed of left) managed.child.kill('SIGKILL');
  await Promise.all(left.map((managed) => managed.exited));
}
