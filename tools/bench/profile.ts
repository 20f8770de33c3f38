/**
 * `npm run bench:profile -- [--posts 10000] [--endpoint authenticated|public] [--connections 10] [--duration 10] [--label NAME] [--server service|limit] [--node image|current|PATH]`
 *
 * V8's own CPU profile of the service under load: starts service/src/main.ts with `node --cpu-prof`
 * on the bench database `sp_bench_<posts>` (seeded by tools/harness/seed.ts if it is missing),
 * logs in, drives one list endpoint with autocannon, stops the service with SIGTERM (the profile is
 * written as it exits), then prints the functions with at least THRESHOLD of the self time and the CPU
 * per request as a Markdown table, and the path of the `.cpuprofile` (Chrome DevTools or
 * speedscope open it). Only samples taken while the load ran count: the profiler's clock and this
 * process's are both the system's monotonic clock.
 */
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { benchServiceEnv, seed } from '../harness/seed';
import { ROOT } from '../harness/service';
import { fmt, log, option, runMain, SIZES, table, usage, type Row } from './common';
import { load, startServer } from './measure';
import { serverNode } from './node';
import { benchToken } from './rounds';

const posts = Number(option('posts', '10000'));
const endpoint = option('endpoint', 'authenticated');
const connections = Number(option('connections', '10'));
const duration = Number(option('duration', '10'));
/** The Node the service runs on, as in `npm run bench` (tools/bench/node.ts). */
const node = serverNode(option('node', 'image'));
/** The service, or the physical limit (tools/bench/limit.ts) profiled the same way, for comparison. */
const serverOption = option('server', 'service');
/** Names the profile's folder among others (before, after). */
const label = option('label', serverOption === 'limit' ? 'limit' : '');
usage(
  SIZES.includes(posts) &&
    (endpoint === 'authenticated' || endpoint === 'public') &&
    Number.isInteger(connections) &&
    connections >= 1 &&
    duration >= 1 &&
    /^[a-z0-9-]{0,32}$/.test(label) &&
    (serverOption === 'service' || serverOption === 'limit'),
  '--posts takes 10000, 100000 or 1000000; --endpoint authenticated or public; --connections a positive whole number; --duration at least 1; --label lower-case letters, digits and dashes; --server service or limit',
);
const THRESHOLD = 0.03;

/** The parts of V8's .cpuprofile format read here. */
interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** The system's monotonic clock in µs, the clock V8's profiler stamps its samples with on Linux. */
const nowUs = () => Number(process.hrtime.bigint() / 1000n);

/** A function's place: its file under the checkout (or URL), and line; '(native)' for V8's and Node's C++. */
function whereOf({ url, lineNumber }: CpuProfile['nodes'][number]['callFrame']): string {
  if (url === '') return '(native)';
  const file = url.startsWith('file://') ? new URL(url).pathname : url;
  return `${file.startsWith(ROOT) ? path.relative(ROOT, file) : file}:${String(lineNumber + 1)}`;
}

/** Self time in µs by function and place, of the samples taken under load only, so start-up and warm-up do not count. */
function selfTimes(profile: CpuProfile, from: number, to: number): Map<string, number> {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const all = new Map<string, number>();
  const during = new Map<string, number>();
  let duringUs = 0;
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    // A sample stands for the time until the next one.
    const us = profile.timeDeltas[i + 1] ?? 0;
    const frame = frames.get(id);
    if (!frame) return;
    const key = `${frame.functionName || '(anonymous)'}\u0000${whereOf(frame)}`;
    all.set(key, (all.get(key) ?? 0) + us);
    if (at < from || at > to) return;
    during.set(key, (during.get(key) ?? 0) + us);
    duringUs += us;
  });
  if (duringUs > 1_000_000 * Math.min(1, duration / 2)) return during;
  log('(the load window is not in the profile: every sample counted, start-up included)');
  return all;
}

/** The functions with at least THRESHOLD of the busy (not idle) time, and the whole, per request. */
function topFunctions(self: Map<string, number>, requests: number): string[] {
  const busy = [...self].filter(([key]) => !key.startsWith('(idle)\u0000'));
  const busyUs = busy.reduce((t, [, us]) => t + us, 0);
  const row = (name: string, where: string, us: number): Row => ({
    Function: name,
    Where: where,
    'Self time': `${fmt((100 * us) / Math.max(busyUs, 1), 1)} %`,
    'CPU µs per request': us / Math.max(requests, 1),
  });
  return table([
    ...busy
      .filter(([, us]) => us >= THRESHOLD * busyUs)
      .sort((a, b) => b[1] - a[1])
      .map(([key, us]) => row(...(key.split('\u0000') as [string, string]), us)),
    row(`**all but (idle)**`, '', busyUs),
  ]);
}

/**
 * The service's profile in `dir`: one file per thread (tsx's loader runs in a thread of its own, idle
 * most of the time), the service's being the one with the most samples outside (idle).
 */
function busiestProfile(dir: string): { file: string; profile: CpuProfile } {
  const busySamples = (p: CpuProfile) => {
    const idle = new Set(p.nodes.filter((n) => n.callFrame.functionName === '(idle)').map((n) => n.id));
    return p.samples.filter((id) => !idle.has(id)).length;
  };
  const [busiest] = readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => {
      const profile = JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as CpuProfile;
      return { file: path.join(dir, f), profile, busy: busySamples(profile) };
    })
    .sort((a, b) => b.busy - a.busy);
  if (!busiest) throw new Error(`no .cpuprofile in ${dir}: the service did not exit cleanly`);
  return { file: busiest.file, profile: busiest.profile };
}

async function main(): Promise<void> {
  const info = await seed(posts, false, log);
  const dir = mkdtempSync(path.join(os.tmpdir(), `sp-profile-${label ? `${label}-` : ''}`));
  const limit = serverOption === 'limit';
  // Straight to closing on SIGTERM: nothing routes traffic here to drain.
  const env = { ...benchServiceEnv(info.database), SHUTDOWN_DELAY_SECONDS: '0' };
  const server = await startServer(
    limit ? 'tools/bench/reference.ts' : 'service/src/main.ts',
    limit ? { ...env, REFERENCE_VERIFIER: 'crypto' } : env,
    // --cpu-prof goes before tsx's --import: the flag is Node's, and the profile is the service's process.
    { node: node.path, nodeArgs: ['--cpu-prof', '--cpu-prof-dir', dir] },
  );
  // The load's start and end on the monotonic clock, and the requests answered in between.
  const measured = { from: 0, to: 0, requests: 0 };
  try {
    const token = await benchToken(server.base);
    const target =
      endpoint === 'public'
        ? { url: `${server.base}/posts/public` }
        : { url: `${server.base}/posts/`, headers: { authorization: `Bearer ${token}` } };
    log(
      `${info.database}: ${endpoint} list, ${String(connections)} connections, 1 s warm-up, then ${String(duration)} s profiled, Node ${node.version}`,
    );
    await load({ ...target, duration: 1 }, { duration, connections });
    measured.from = nowUs();
    const result = await load(target, { duration, connections });
    measured.to = nowUs();
    measured.requests = result.requests.total;
    log(
      `${String(Math.round(result.requests.average))} req/s, p50 ${String(result.latency.p50)} ms, p99 ${String(result.latency.p99)} ms, errors ${String(result.errors + result.timeouts)}, non-2xx ${String(result.non2xx)} (the profiler slows the service)`,
    );
  } finally {
    const code = await server.stop('SIGTERM');
    if (code !== 0) log(`the service exited with ${String(code)}: ${server.stderr()}`);
  }
  const { file, profile } = busiestProfile(dir);
  const self = selfTimes(profile, measured.from, measured.to);
  log(['', ...topFunctions(self, measured.requests), ''].join('\n'));
  log(`profile: ${file} (open it in Chrome DevTools, Performance tab, or https://www.speedscope.app)`);
}

runMain(main);
