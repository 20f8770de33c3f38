/**
 * `npm run bench:profile -- [--posts 10000] [--endpoint authenticated|public] [--connections 10] [--duration 10] [--label NAME] [--server service|limit] [--node image|current|PATH]`
 *
 * A CPU profile of the service under load: starts service/src/main.ts with `node --cpu-prof` on
 * the bench database `sp_bench_<posts>` (seeded by tools/harness/seed.ts if it is missing, reused
 * otherwise), logs in, drives one list endpoint with autocannon, stops the service with SIGTERM
 * (the profile is written as it exits) and prints the functions with at least 3 % of the self
 * time, the self time by package or file, and the CPU per request split by stage
 * (tools/bench/profile-stages.ts) as a Markdown table, then the path of the `.cpuprofile` itself.
 * Only samples taken while the load ran count: the profiler's clock and this process's are both
 * the system's monotonic clock.
 */
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { profileSection, sampleStage, type Frame, type Stage, type StageProfile } from './profile-stages';
import { benchServiceEnv, seed } from '../harness/seed';
import { serverNode } from './node';
import { benchToken, option } from './rounds';
import { freePort, ROOT, spawnScript, waitForAnswer } from '../harness/service';

const posts = Number(option('posts', '10000'));
const endpointOption = option('endpoint', 'authenticated');
const connections = Number(option('connections', '10'));
const duration = Number(option('duration', '10'));
/** The Node the service runs on, as in `npm run bench` (tools/bench/node.ts). */
const node = serverNode(option('node', 'image'));
/** The service, or the physical limit (tools/bench/limit.ts) profiled the same way, for comparison. */
const serverOption = option('server', 'service');
/** Names the profile among others of the same endpoint (before, after): its column in the table. */
const label = option('label', serverOption === 'limit' ? 'limit' : '');
if (endpointOption !== 'authenticated' && endpointOption !== 'public') {
  process.stderr.write('--endpoint takes authenticated or public\n');
  process.exit(2);
}
const endpoint: StageProfile['endpoint'] = endpointOption;
if (
  ![10_000, 100_000, 1_000_000].includes(posts) ||
  !Number.isInteger(connections) ||
  connections < 1 ||
  !(duration >= 1) ||
  !/^[a-z0-9-]{0,32}$/.test(label) ||
  (serverOption !== 'service' && serverOption !== 'limit')
) {
  process.stderr.write(
    '--posts takes 10000, 100000 or 1000000; --connections a positive whole number; --duration at least 1; --label lower-case letters, digits and dashes; --server service or limit\n',
  );
  process.exit(2);
}
const THRESHOLD = 0.03;

const log = (line: string) => {
  process.stdout.write(`${line}\n`);
};

interface ProfileNode {
  id: number;
  callFrame: Frame & { lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** The system's monotonic clock in µs, the clock V8's profiler stamps its samples with on Linux. */
const nowUs = () => Number(process.hrtime.bigint() / 1000n);

async function load(
  url: string,
  headers: Record<string, string>,
  seconds: number,
): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url, headers, connections, duration: seconds }, (error: unknown, result) => {
      if (error) reject(error instanceof Error ? error : new Error('autocannon failed'));
      else resolve(result);
    });
  });
}

/** Where a function lives, in the groups the aggregate uses. */
function placeOf(frame: ProfileNode['callFrame']): string {
  const { url, functionName } = frame;
  // No script: V8's builtins and Node's C++ bindings (writev, JSON.stringify...), or a V8 state.
  if (url === '') return /^\(.*\)$/.test(functionName) ? functionName : 'node internals (native)';
  if (url.startsWith('node:')) return 'node internals (JS)';
  const modules = url.lastIndexOf('/node_modules/');
  if (modules >= 0) {
    const [scope, name] = url.slice(modules + '/node_modules/'.length).split('/');
    return `node_modules/${scope?.startsWith('@') ? `${scope}/${name ?? ''}` : (scope ?? '?')}`;
  }
  const file = url.startsWith('file://') ? new URL(url).pathname : url;
  return file.startsWith(ROOT) ? path.relative(ROOT, file) : file;
}

/** Self time per node id within [from, to] (µs, profile clock); all samples when the window misses. */
function selfTimes(
  profile: CpuProfile,
  from: number,
  to: number,
): { self: Map<number, number>; windowed: boolean } {
  const timed: { node: number; at: number; us: number }[] = [];
  let at = profile.startTime;
  profile.samples.forEach((node, i) => {
    at += profile.timeDeltas[i] ?? 0;
    // A sample stands for the time until the next one.
    timed.push({ node, at, us: profile.timeDeltas[i + 1] ?? 0 });
  });
  const inside = timed.filter((s) => s.at >= from && s.at <= to);
  // Fewer than a second's worth of samples in the window: the clocks do not match here.
  const windowed = inside.reduce((t, s) => t + s.us, 0) > 1_000_000 * Math.min(1, duration / 2);
  const self = new Map<number, number>();
  for (const s of windowed ? inside : timed) self.set(s.node, (self.get(s.node) ?? 0) + s.us);
  return { self, windowed };
}

/** Busy µs per stage: each node's self time goes to the stage of its stack (sampleStage). */
function stageTimes(profile: CpuProfile, self: Map<number, number>): Partial<Record<Stage, number>> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const child of n.children ?? []) parent.set(child, n.id);
  const out: Partial<Record<Stage, number>> = {};
  for (const [id, us] of self) {
    if (byId.get(id)?.callFrame.functionName === '(idle)') continue;
    const stack: Frame[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)?.callFrame;
      if (frame) stack.push(frame);
    }
    const stage = sampleStage(stack, ROOT);
    out[stage] = (out[stage] ?? 0) + us;
  }
  return out;
}

function report(profile: CpuProfile, from: number, to: number): { busy: number; self: Map<number, number> } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const { self, windowed } = selfTimes(profile, from, to);
  if (!windowed) log('(the load window is not in the profile: every sample counted, start-up included)');
  const functions = new Map<string, number>();
  const places = new Map<string, number>();
  let idle = 0;
  let busy = 0;
  for (const [id, us] of self) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) continue;
    if (frame.functionName === '(idle)') {
      idle += us;
      continue;
    }
    busy += us;
    const place = placeOf(frame);
    const name = `${frame.functionName || '(anonymous)'}  ${place}${frame.url ? `:${String(frame.lineNumber + 1)}` : ''}`;
    functions.set(name, (functions.get(name) ?? 0) + us);
    places.set(place, (places.get(place) ?? 0) + us);
  }
  const pct = (us: number) => `${((100 * us) / Math.max(busy, 1)).toFixed(1).padStart(5)} %`;
  log(
    `\nbusy ${(busy / 1e6).toFixed(2)} s, idle ${(idle / 1e6).toFixed(2)} s of CPU-profiled time; shares are of the busy time`,
  );
  log(`\nfunctions with ≥ ${String(THRESHOLD * 100)} % self time:`);
  for (const [name, us] of [...functions]
    .sort((a, b) => b[1] - a[1])
    .filter(([, us]) => us >= THRESHOLD * busy))
    log(`  ${pct(us)}  ${name}`);
  log('\nself time by package or file:');
  for (const [place, us] of [...places].sort((a, b) => b[1] - a[1]).filter(([, us]) => us >= 0.005 * busy))
    log(`  ${pct(us)}  ${place}`);
  return { busy, self };
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
  const profiles = readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => ({
      file: path.join(dir, f),
      profile: JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as CpuProfile,
    }))
    .sort((a, b) => busySamples(b.profile) - busySamples(a.profile));
  const largest = profiles[0];
  if (!largest) throw new Error(`no .cpuprofile in ${dir}: the service did not exit cleanly`);
  return largest;
}

async function main(): Promise<void> {
  const info = await seed(posts, false, log);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sp-profile-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${String(port)}`;
  const env = {
    ...process.env,
    ...benchServiceEnv(info.database),
    PORT: String(port),
    // Straight to closing on SIGTERM: nothing routes traffic here to drain.
    SHUTDOWN_DELAY_SECONDS: '0',
  };
  // --cpu-prof goes before tsx's --import: the flag is Node's, and the profile is the service's process.
  const limit = serverOption === 'limit';
  const proc = spawnScript(
    limit ? 'tools/bench/reference.ts' : 'service/src/main.ts',
    limit ? { ...env, REFERENCE_VERIFIER: 'crypto' } : env,
    {
      keep: () => false,
      nodeArgs: ['--cpu-prof', '--cpu-prof-dir', dir],
      node: node.path,
    },
  );
  // The load's start and end on the monotonic clock, set once it has run.
  const window = { from: 0, to: 0 };
  const measured = { requests: 0, rps: 0 };
  try {
    await waitForAnswer(`${base}/healthz/live`, proc, 120_000);
    const token = await benchToken(base);
    const [url, headers] =
      endpoint === 'public'
        ? [`${base}/posts/public`, {}]
        : [`${base}/posts/`, { authorization: `Bearer ${token}` }];
    log(
      `${info.database}: ${endpoint} list, ${String(connections)} connections, 1 s warm-up, then ${String(duration)} s profiled`,
    );
    await load(url, headers, 1);
    window.from = nowUs();
    const result = await load(url, headers, duration);
    window.to = nowUs();
    measured.requests = result.requests.total;
    measured.rps = Math.round(result.requests.average);
    log(
      `${String(Math.round(result.requests.average))} req/s, p50 ${String(result.latency.p50)} ms, p99 ${String(result.latency.p99)} ms, errors ${String(result.errors + result.timeouts)}, non-2xx ${String(result.non2xx)} (the profiler slows the service)`,
    );
  } finally {
    const code = await proc.stop('SIGTERM');
    if (code !== 0) log(`the service exited with ${String(code)}: ${proc.stderr()}`);
  }
  const largest = busiestProfile(dir);
  const { busy, self } = report(largest.profile, window.from, window.to);
  const split: StageProfile = {
    endpoint,
    label,
    posts,
    connections,
    duration,
    measuredAt: new Date().toISOString(),
    node: node.version,
    requests: measured.requests,
    rps: measured.rps,
    busyUs: busy,
    stages: stageTimes(largest.profile, self),
    loadAverage: Number(os.loadavg()[0]?.toFixed(2)),
  };
  log(['', ...profileSection(split)].join('\n'));
  log(
    `profile: ${largest.file} (open it in Chrome DevTools, Performance tab, or https://www.speedscope.app)`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(
    `profile failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
