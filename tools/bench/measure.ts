/**
 * What every bench script measures with: a server script started on a free port, autocannon runs
 * bounded by time or by amount, the server's own CPU time per request, and waiting for it to go
 * idle between runs (tools/bench/run.ts, tools/bench/pooler.ts).
 */
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import autocannon from 'autocannon';
import { freePort, spawnScript, waitForAnswer } from '../harness/service';

/** What one load run of one endpoint measured. */
export interface EndpointFigures {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
  requests: number;
  /** The server process's own CPU time per request (user + system), where /proc tells it. */
  cpuUsPerRequest?: number;
}

export interface Server {
  child: ChildProcessWithoutNullStreams;
  base: string;
  /** Sends `signal` (SIGKILL by default) and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** The tail of what it wrote to stderr. */
  stderr(): string;
}

/**
 * Starts a server script on a free port, on the given Node, and resolves once it answers HTTP.
 * `cwd` runs another checkout's copy of the script (an older release, say); `nodeArgs` go before
 * the script, and `withinMs` bounds the start (a server under valgrind takes minutes).
 */
export async function startServer(
  script: string,
  env: Record<string, string>,
  options: { node: string; cwd?: string; nodeArgs?: string[]; withinMs?: number },
): Promise<Server> {
  const port = await freePort();
  // The service logs at warn here, so readiness is an HTTP answer, not the "listening" line.
  const proc = spawnScript(
    script,
    { ...process.env, ...env, PORT: String(port) },
    {
      keep: () => false,
      node: options.node,
      ...(options.cwd ? { cwd: options.cwd } : {}),
      ...(options.nodeArgs ? { nodeArgs: options.nodeArgs } : {}),
    },
  );
  const base = `http://127.0.0.1:${String(port)}`;
  try {
    await waitForAnswer(`${base}/healthz/live`, proc, options.withinMs ?? 120_000);
  } catch (error) {
    await proc.stop();
    throw new Error(`${script} did not start`, { cause: error });
  }
  return {
    child: proc.child,
    base,
    stop: (signal) => proc.stop(signal),
    stderr: () => proc.stderr(),
  };
}

/** One autocannon run, bounded by its amount of requests when given one, otherwise by `duration`. */
export async function load(
  options: autocannon.Options,
  defaults: { duration: number; connections: number },
): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const bound = options.amount === undefined ? { duration: defaults.duration } : {};
    autocannon({ connections: defaults.connections, ...bound, ...options }, (error: unknown, result) => {
      if (error) reject(error instanceof Error ? error : new Error('autocannon failed'));
      else resolve(result);
    });
  });
}

const figures = (r: autocannon.Result, cpuMs: number | undefined): EndpointFigures => ({
  rps: Math.round(r.requests.average),
  p50: r.latency.p50,
  p99: r.latency.p99,
  errors: r.errors + r.timeouts,
  non2xx: r.non2xx,
  requests: r.requests.total,
  ...(cpuMs === undefined || r.requests.total === 0
    ? {}
    : { cpuUsPerRequest: Math.round((cpuMs * 1000) / r.requests.total) }),
});

/** /proc/<pid>/stat's fields after the process's name (state first); none where /proc tells none. */
function statFields(pid: number | string | undefined): string[] {
  try {
    return (
      readFileSync(`/proc/${String(pid)}/stat`, 'utf8')
        .split(') ')[1]
        ?.split(' ') ?? []
    );
  } catch {
    return [];
  }
}

/**
 * CPU time (user + system) a process has used, in ms, from /proc (Linux); undefined elsewhere.
 * Per request it is a steadier measure of a server's own cost than throughput, which also depends
 * on the database and the load generator sharing the machine.
 */
export function cpuMsOf(pid: number | undefined): number | undefined {
  const fields = statFields(pid);
  const ticks = Number(fields[11]) + Number(fields[12]);
  // Linux reports these in clock ticks of 1/100 s (USER_HZ) on every common architecture.
  return Number.isFinite(ticks) ? ticks * 10 : undefined;
}

/** A PostgreSQL server's postmaster (from postmaster.pid) and its children, its backends among them. */
export function postgresProcesses(dataDirectory: string): number[] {
  const postmaster = Number(readFileSync(path.join(dataDirectory, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const children = readdirSync('/proc').filter(
    (pid) => /^\d+$/.test(pid) && Number(statFields(pid)[1]) === postmaster,
  );
  return [postmaster, ...children.map(Number)];
}

/**
 * Waits (at most 30 s) until the server's process is idle: under 10 % of a core over 200 ms. When
 * autocannon stops, the requests it leaves in flight still run; 64 logins queued behind bcrypt
 * take seconds and would otherwise land in the next measurement.
 */
export async function settle(server: Server): Promise<void> {
  const deadline = Date.now() + 30_000;
  let before = cpuMsOf(server.child.pid);
  while (before !== undefined && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const now = cpuMsOf(server.child.pid);
    if (now === undefined || now - before <= 20) return;
    before = now;
  }
}

/**
 * One server on one endpoint: a warm-up of `warmup` seconds (JIT, pool connections, PostgreSQL's
 * cache; 0 skips it), then the run, each followed by waiting for the server to go idle.
 */
export async function measure(
  server: Server,
  options: autocannon.Options,
  run: { duration: number; connections: number; warmup: number },
  beforeRun?: () => Promise<void>,
): Promise<EndpointFigures> {
  if (run.warmup > 0) {
    await load({ ...options, duration: run.warmup }, run);
    await settle(server);
  }
  await beforeRun?.();
  const cpuBefore = cpuMsOf(server.child.pid);
  const result = await load(options, run);
  const cpuAfter = cpuMsOf(server.child.pid);
  await settle(server);
  return figures(
    result,
    cpuBefore === undefined || cpuAfter === undefined ? undefined : cpuAfter - cpuBefore,
  );
}

/** One run's figures on a line, after what was run. */
export const progress = (what: string, f: EndpointFigures): string =>
  `${what} ${String(f.rps).padStart(6)} req/s  p50 ${String(f.p50).padStart(4)} ms  p99 ${String(f.p99).padStart(5)} ms  errors ${String(f.errors)}  non-2xx ${String(f.non2xx)}  CPU ${f.cpuUsPerRequest === undefined ? '?' : String(f.cpuUsPerRequest)} µs/req`;

/** The middle value (the mean of the two middle ones for an even count). */
export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] ?? 0) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
};
