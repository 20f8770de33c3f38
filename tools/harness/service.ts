/**
 * The service (or another script of this repository) as its own process, the way every suite that
 * needs a real process starts it: tests/service (process, observability), tests/reliability/,
 * tests/browser/ and tools/bench/. `node --import tsx <script>` from the repository root, its JSON log
 * read line by line, the port taken from the "listening" line.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { pollUntil } from './poll';
import { memoryCgroup } from './memory-limit';
import { track, type Managed } from './processes';

export const ROOT = path.join(__dirname, '..', '..');

/** One pino line, with its arrival time in this process. */
export interface LogLine {
  time?: string;
  level?: number;
  msg?: string;
  at: number;
  [key: string]: unknown;
}

export interface ScriptProcess {
  child: ChildProcessWithoutNullStreams;
  /** Everything written to stdout so far ('' when `keep` filters the lines). */
  stdout(): string;
  /** stderr so far (its last 64 kB). */
  stderr(): string;
  /** The JSON log lines kept so far: all of them, or those `keep` selects. */
  lines: LogLine[];
  /** Resolves with the exit code (null after a signal). */
  exited: Promise<number | null>;
  /** Resolves with the first kept log line whose msg matches; rejects on time-out or exit. */
  waitForLog(pattern: RegExp, withinMs: number): Promise<LogLine>;
  /** Sends the signal (unless the process has exited) and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface SpawnOptions {
  /** Folder the script path is relative to; the repository root by default. */
  cwd?: string;
  /**
   * Keeps only the log lines it selects, and no stdout text, so a process under long load
   * cannot fill memory. Without it every line and all of stdout are kept.
   */
  keep?: (line: LogLine) => boolean;
  /** Node options before `--import tsx` (tools/bench/profile.ts passes --cpu-prof). */
  nodeArgs?: string[];
  /** The script's own arguments. */
  args?: string[];
  /** The node binary; this process's own by default (the bench picks the image's release). */
  node?: string;
  /** A memory limit as a container's (tools/harness/memory-limit.ts); none by default. */
  memoryLimitBytes?: number;
}

const STDERR_TAIL = 64 * 1024;

/** Spawns `node [nodeArgs] --import tsx <script>`, in a memory cgroup when asked, and tracks it. */
function spawnTracked(
  script: string,
  env: NodeJS.ProcessEnv,
  options: SpawnOptions,
): { child: ChildProcessWithoutNullStreams; managed: Managed } {
  const childEnv = { ...env };
  delete childEnv.NODE_OPTIONS; // jest's flags (vm-modules) are not the child's business
  const node = options.node ?? process.execPath;
  const nodeArgs = [...(options.nodeArgs ?? []), '--import', 'tsx', script, ...(options.args ?? [])];
  const cgroup =
    options.memoryLimitBytes === undefined
      ? undefined
      : memoryCgroup(path.basename(script, '.ts'), options.memoryLimitBytes);
  const { command, args } = cgroup ? cgroup.wrap([node, ...nodeArgs]) : { command: node, args: nodeArgs };
  const child = spawn(command, args, { cwd: options.cwd ?? ROOT, env: childEnv });
  let managed: Managed;
  try {
    managed = track(script, child);
  } catch (error) {
    // Nothing started, so nothing will ever exit to remove the cgroup.
    cgroup?.remove();
    throw error;
  }
  if (cgroup) {
    void managed.exited.then(() => {
      cgroup.remove();
    });
  }
  return { child, managed };
}

/** Someone waiting for the first kept log line whose msg matches `pattern`. */
interface LogWaiter {
  pattern: RegExp;
  resolve: (line: LogLine) => void;
}

/** What the child has written so far, read from its stdout and stderr as they arrive. */
interface Output {
  lines: LogLine[];
  waiters: LogWaiter[];
  stdout: () => string;
  stderr: () => string;
}

/** Reads the child's stdout into JSON log lines (handing each to its waiters) and keeps stderr's tail. */
function readOutput(child: ChildProcessWithoutNullStreams, options: SpawnOptions): Output {
  const lines: LogLine[] = [];
  const waiters: LogWaiter[] = [];
  let out = '';
  let pending = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => {
    const at = Date.now();
    const text = chunk.toString();
    if (!options.keep) out += text;
    pending += text;
    const complete = pending.split('\n');
    pending = complete.pop() ?? '';
    for (const raw of complete) {
      let line: LogLine;
      try {
        line = { ...(JSON.parse(raw) as Omit<LogLine, 'at'>), at };
      } catch {
        continue; // not a log line (a stack trace, say): stdout() still has it
      }
      if (options.keep && !options.keep(line)) continue;
      if (!options.keep || lines.length < 2000) lines.push(line);
      for (const w of [...waiters]) {
        if (w.pattern.test(line.msg ?? '')) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err = (err + chunk.toString()).slice(-STDERR_TAIL);
  });
  return { lines, waiters, stdout: () => out, stderr: () => err };
}

/** ScriptProcess.waitForLog over `output`, for the process of `script` that ends with `exited`. */
function logWaiter(
  script: string,
  output: Output,
  exited: Promise<unknown>,
): (pattern: RegExp, withinMs: number) => Promise<LogLine> {
  return (pattern, withinMs) => {
    const seen = output.lines.find((l) => pattern.test(l.msg ?? ''));
    if (seen) return Promise.resolve(seen);
    return new Promise<LogLine>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new Error(
            `no log line matching ${String(pattern)} within ${withinMs} ms; stderr: ${output.stderr()}`,
          ),
        );
      }, withinMs);
      output.waiters.push({
        pattern,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      });
      void exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`${script} exited before logging ${String(pattern)}; stderr: ${output.stderr()}`));
      });
    });
  };
}

/** Starts `node [nodeArgs] --import tsx <script>` with exactly `env` (minus jest's NODE_OPTIONS). */
export function spawnScript(
  script: string,
  env: NodeJS.ProcessEnv,
  options: SpawnOptions = {},
): ScriptProcess {
  const { child, managed } = spawnTracked(script, env, options);
  const output = readOutput(child, options);
  const exited = managed.exited.then(() => child.exitCode);
  return {
    child,
    stdout: output.stdout,
    stderr: output.stderr,
    lines: output.lines,
    exited,
    waitForLog: logWaiter(script, output, exited),
    stop: (signal = 'SIGKILL') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

export interface ServiceProcess extends ScriptProcess {
  pid: number;
  port: number;
  metricsPort: number;
  /** http://127.0.0.1:<port> */
  base: string;
}

/**
 * Starts service/src/main.ts with `env` and resolves once it logs where it listens (so `env` must
 * leave LOG_LEVEL at info or debug). If it does not start, it is killed and the error says why.
 */
export async function startService(
  env: NodeJS.ProcessEnv,
  options: SpawnOptions & { withinMs?: number } = {},
): Promise<ServiceProcess> {
  const proc = spawnScript('service/src/main.ts', env, options);
  let listening: LogLine;
  try {
    listening = await proc.waitForLog(/^listening on http/, options.withinMs ?? 90_000);
  } catch (error) {
    await proc.stop();
    throw new Error(`the service did not start:\n${proc.stdout()}\n${proc.stderr()}`, { cause: error });
  }
  const port = Number(listening.port);
  const pid = proc.child.pid;
  if (!pid || !Number.isInteger(port) || port <= 0) throw new Error('no port in the listening line');
  return {
    ...proc,
    pid,
    port,
    metricsPort: Number(listening.metricsPort),
    base: `http://127.0.0.1:${port}`,
  };
}

/** Polls until `url` answers HTTP at all (any status); throws if the process exits or time runs out. */
export async function waitForAnswer(url: string, proc: ScriptProcess, withinMs: number): Promise<void> {
  const { value } = await pollUntil(
    () =>
      proc.child.exitCode !== null
        ? 'exited'
        : fetch(url, { signal: AbortSignal.timeout(2000) }).then(
            () => 'answered',
            () => 'silent',
          ),
    (seen) => seen !== 'silent',
    { withinMs, everyMs: 200 },
  );
  if (value === 'exited')
    throw new Error(`the process exited with ${String(proc.child.exitCode)}: ${proc.stderr()}`);
  if (value === 'silent') throw new Error(`${url} did not answer within ${withinMs} ms: ${proc.stderr()}`);
}

// Kills every process a harness started that is still running (by pid, never by name).
export { stopAll } from './processes';

/** The server listening on a free port of 127.0.0.1; resolves with that port. */
export async function listenLocal(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

/** A port nothing listens on at the moment of asking. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  const port = await listenLocal(server);
  await new Promise((resolve) => server.close(resolve));
  return port;
}
