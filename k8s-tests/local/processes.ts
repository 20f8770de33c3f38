/** Child processes of the runner: each one started, watched and stopped by its own pid. */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { request } from 'node:http';
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

/** Starts a process with its output appended to a log file; it is tracked until it exits. */
export function start(
  name: string,
  command: string,
  args: string[],
  logFile: string,
  options: SpawnOptions = {},
): Managed {
  const fd = openSync(logFile, 'a');
  const child = spawn(command, args, { ...options, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  if (child.pid === undefined) throw new Error(`${name}: could not start ${command}`);
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

// One definition of a free port for every harness.
export { freePort } from '../../testing/service';

/** GET on 127.0.0.1 with a fresh connection; the status, or 0 when there is no answer in time. */
export function probe(
  port: number,
  path: string,
  timeoutMs: number,
): Promise<{ status: number; body: string }> {
  return new Promise((resolvePromise) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        resolvePromise({ status: res.statusCode ?? 0, body });
      });
      res.on('error', () => {
        resolvePromise({ status: 0, body: '' });
      });
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => {
      resolvePromise({ status: 0, body: '' });
    });
    req.end();
  });
}

/** Polls until check() is true; bounded by timeoutMs. */
export async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  everyMs = 200,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
