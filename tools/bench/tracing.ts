/**
 * `npm run bench:tracing -- [--posts 10000] [--rounds 5] [--duration 4] [--connections 10] [--node image|current|PATH]`
 * `npm run bench:tracing -- --count instructions [--requests 1000] [--warmup 10000] [--settling-rounds 1] [--rounds 3] [--connections 1]`
 *
 * What tracing costs: the same service four times on one seeded database, tracing off (no
 * OTEL_EXPORTER_OTLP_ENDPOINT) twice, sampling one trace in ten (parentbased_traceidratio at 0.1)
 * and every trace (at 1), the last two exporting OTLP/HTTP protobuf to a collector in this process
 * that reads and discards each batch. Alternating rounds (tools/bench/rounds.ts) on the public and
 * the signed-in list; prints the server's CPU per request, median of the rounds, and each against
 * off, the second server with tracing off included, as the measure of the bench's own spread. The
 * target is within 5 % of off at one in ten.
 *
 * `--count instructions` counts instructions instead, which CPU time on a shared machine cannot
 * resolve to 5 %: each server runs under valgrind's callgrind (a fifth at ratio 0 parts the
 * unsampled request's cost from the sampled tenth's), and a round on a list is `--requests`
 * requests between a zeroing of the counters and a dump, after an uncounted warm-up of `--warmup`
 * requests a list and `--settling-rounds` rounds run alike but not kept; the figure is the mean of
 * the rounds kept. Counting only between the two, in a server
 * already warm, leaves start-up and most of the JIT's warm-up out, which two whole runs of N and 2N
 * requests would only cancel if both warmed up alike.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { loadAverageText, log, mark, option, runMain, SIZES, table, usage, type Row } from './common';
import { load, settle, startServer, median, type Server } from './measure';
import { serverNode } from './node';
import { alternatingRounds, benchToken, turned, type Contender, type MeasuredList } from './rounds';
import { benchServiceEnv, seed } from '../harness/seed';

const count = option('count', 'cpu');
const instructions = count === 'instructions';
const posts = Number(option('posts', '10000'));
const rounds = Number(option('rounds', instructions ? '3' : '5'));
const duration = Number(option('duration', '4'));
// One at a time under valgrind: how many requests share an event-loop turn would vary with timing.
const connections = Number(option('connections', instructions ? '1' : '10'));
const requests = Number(option('requests', '1000'));
const warmup = Number(option('warmup', '10000'));
const settlingRounds = Number(option('settling-rounds', '1'));
const node = serverNode(option('node', 'image'));
usage(
  ['cpu', 'instructions'].includes(count) &&
    SIZES.includes(posts) &&
    rounds >= 1 &&
    duration >= 1 &&
    connections >= 1 &&
    requests >= 1 &&
    warmup >= 0 &&
    settlingRounds >= 0,
  '--count takes cpu or instructions; --posts 10000, 100000 or 1000000; --rounds, --duration, --connections and --requests positive numbers',
);

const TARGET = 0.05;

const LISTS: MeasuredList[] = [
  { list: 'public list', path: '/posts/public', signedIn: false },
  { list: 'signed-in list', path: '/posts/', signedIn: true },
];

/** A collector that takes every export and keeps nothing: the bench measures the service, not it. */
async function sinkCollector(): Promise<{ endpoint: string; batches: () => number; close: () => void }> {
  let batches = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      batches++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`,
    batches: () => batches,
    close: () => server.close(),
  };
}

interface Setting {
  key: string;
  name: string;
  extra: Record<string, string>;
}

/** Each round's figure, by list and setting. */
type Figures = Map<string, number[]>;
const figureKey = (list: string, key: string) => `${list}\u0000${key}`;
const record = (figures: Figures, list: string, key: string, value: number) => {
  figures.set(figureKey(list, key), [...(figures.get(figureKey(list, key)) ?? []), value]);
};

/** The CPU count: timed runs of autocannon, each server's CPU time from /proc. */
async function cpuRounds(contenders: Contender[], figures: Figures): Promise<void> {
  const series = await alternatingRounds(contenders, LISTS, {
    rounds,
    connectionCounts: [connections],
    duration,
    warmup: 1,
  });
  for (const s of series) figures.set(figureKey(s.list, s.key), s.cpuUs);
}

/**
 * Callgrind around the server's node: counting starts after the start-up, and V8's JIT rewrites code
 * in anonymous memory, which valgrind must check for changes.
 */
const callgrindArgs = (outFile: string): string[] => [
  '--tool=callgrind',
  '--smc-check=all-non-file',
  '--instr-atstart=no',
  // One dump per thread: the main thread's JavaScript apart from V8's collector and compiler threads.
  '--separate-threads=yes',
  `--callgrind-out-file=${outFile}`,
];

/**
 * Valgrind slows the process some fifty times, so what follows the clock is stretched alike: a
 * request's database budget, the bench's token, which must outlive the run, and the export delay,
 * so that batches fill to the size they reach at native speed instead of the timer sending many
 * small ones, each with its fixed cost.
 */
const UNDER_VALGRIND = {
  DB_STATEMENT_TIMEOUT_MS: '600000',
  ACCESS_TOKEN_EXPIRE_MINUTES: '1440',
  OTEL_BSP_SCHEDULE_DELAY: '250000',
};

/**
 * V8 under callgrind with its compilers and collector on the main thread, the collector's schedule
 * fixed: valgrind runs one thread at a time, so background compiles finish late and at times that
 * vary, and two identical servers were seen to run for rounds partly in unoptimised code, apart by
 * more than the target. So each server tiers up after the same work.
 */
const V8_PREDICTABLE = ['--single-threaded', '--predictable-gc-schedule'];

/** A server under callgrind: its control commands (through vgdb) and the total of each dump. */
class Counted {
  private dumps = 0;
  constructor(
    readonly server: Server,
    private readonly outFile: string,
  ) {}

  private control(flag: string): void {
    execFileSync('callgrind_control', [flag, String(this.server.child.pid)], { stdio: 'ignore' });
  }

  /** Counting on from here: the start-up and the warm-up run uninstrumented, a few times faster. */
  instrument(): void {
    this.control('--instr=on');
  }

  zero(): void {
    this.control('-z');
  }

  /**
   * Dumps the counts since the last zero or dump: every thread's instructions, and the main thread's
   * outside V8's collector (its collections and incremental marking steps, by callgrind_annotate's
   * inclusive counts), and that outside the optimising compiler too, the request path's own work.
   */
  dump(): { all: number; main: number; path: number } {
    this.control('-d');
    this.dumps++;
    const files = readdirSync(path.dirname(this.outFile))
      .filter((f) => f.startsWith(`${path.basename(this.lastDump())}-`))
      .map((f) => path.join(path.dirname(this.outFile), f));
    const mainFile = files.find((f) => f.endsWith('-01'));
    if (mainFile === undefined) throw new Error(`no main thread's dump for ${this.lastDump()}`);
    const all = files.reduce((sum, file) => sum + dumpTotal(file), 0);
    const annotated = inclusiveCounts(mainFile);
    const main = dumpTotal(mainFile) - entryInstructions(annotated, COLLECTOR_ENTRIES);
    return { all, main, path: main - entryInstructions(annotated, COMPILER_ENTRIES) };
  }

  /** The last dump's name, before each thread's suffix (for callgrind_annotate). */
  lastDump(): string {
    return `${this.outFile}.${String(this.dumps)}`;
  }
}

/** A callgrind dump's total of instructions. */
function dumpTotal(file: string): number {
  const total = /^(?:summary|totals): (\d+)/m.exec(readFileSync(file, 'utf8'))?.[1];
  if (total === undefined) throw new Error(`no total in ${file}`);
  return Number(total);
}

/** V8's collector entered from the main thread: its collections and its incremental marking steps. */
const COLLECTOR_ENTRIES = [
  'v8::internal::Heap::CollectGarbage(v8::internal::AllocationSpace, v8::internal::GarbageCollectionReason, v8::GCCallbackFlags) [',
  'v8::internal::IncrementalMarking::Step(',
];

/**
 * V8's optimising compilers entered from the main thread (Maglev's and TurboFan's, run there with
 * --single-threaded): natively on helper threads, and done once the code has settled.
 */
const COMPILER_ENTRIES = ['v8::internal::Compiler::CompileOptimized('];

/** callgrind_annotate's inclusive count of each function in a dump. */
const inclusiveCounts = (file: string): string =>
  execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], {
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
  });

/** The instructions under any of `entries` (functions that do not call one another), by their inclusive counts. */
function entryInstructions(annotated: string, entries: string[]): number {
  let sum = 0;
  for (const line of annotated.split('\n')) {
    const count = /^\s*([\d,]+)\s/.exec(line)?.[1];
    if (count !== undefined && entries.some((entry) => line.includes(entry)))
      sum += Number(count.replaceAll(',', ''));
  }
  return sum;
}

/**
 * The instruction count: each round, each list, each server in an order that turns each round,
 * `requests` requests between a zero and a dump. They must all answer 200, or the count is of other work.
 */
async function instructionRounds(
  contenders: (Contender & { counted: Counted })[],
  figures: Figures,
): Promise<void> {
  const run = async (c: Contender, list: MeasuredList, amount: number, at = connections) => {
    const result = await load(
      {
        url: `${c.server.base}${list.path}`,
        amount,
        timeout: 600,
        ...(list.signedIn ? { headers: { authorization: `Bearer ${c.token}` } } : {}),
      },
      { duration, connections: at },
    );
    if (result.errors + result.timeouts + result.non2xx > 0 || result.requests.total !== amount)
      throw new Error(
        `${c.key} on the ${list.list}: ${String(result.requests.total)} of ${String(amount)} answered, ${String(result.non2xx)} not 2xx, ${String(result.errors)} errors, ${String(result.timeouts)} time-outs`,
      );
    await settle(c.server);
  };
  // Every server warms up at once and several requests at a time, only to be done sooner: the warm-up is not counted.
  await Promise.all(
    contenders.map(async (c) => {
      for (const list of warmup > 0 ? LISTS : []) {
        const started = Date.now();
        await run(c, list, warmup, Math.max(connections, 4));
        log(
          `warm-up ${list.list.padEnd(15)} ${c.key.padEnd(9)} ${String(warmup)} requests in ${String(Math.round((Date.now() - started) / 1000))} s`,
        );
      }
    }),
  );
  for (const c of contenders) {
    c.counted.instrument();
    // Valgrind now translates all code again, instrumented: slow, so a few requests before the first count.
    for (const list of LISTS) await run(c, list, 50);
  }
  // Settling rounds first, run as the others are but not kept: the first instrumented rounds were
  // seen to run partly in less optimised code, two identical servers apart by more than the target.
  for (let round = -settlingRounds; round < rounds; round++)
    for (const list of LISTS) {
      for (const c of turned(contenders, round + settlingRounds)) {
        c.counted.zero();
        const started = Date.now();
        await run(c, list, requests);
        const counted = c.counted.dump();
        const perRequest = counted.all / requests;
        if (round >= 0) {
          for (const m of COUNTED_MEASURES)
            record(figures, `${list.list}${m.suffix}`, c.key, counted[m.part] / requests);
        }
        log(
          `${round >= 0 ? `round ${String(round + 1)}` : 'settling'}  ${list.list.padEnd(15)} ${c.key.padEnd(9)} ${(perRequest / 1e6).toFixed(3)} M instructions/req, ${(counted.main / requests / 1e6).toFixed(3)} M on the main thread outside the collector, ${(counted.path / requests / 1e6).toFixed(3)} M outside the compiler too  (${String(Math.round((Date.now() - started) / 1000))} s; ${c.counted.lastDump()}-*)`,
        );
      }
    }
}

/** What the instruction count prints, a table each: the dump's part, its figures' key suffix, its words. */
const COUNTED_MEASURES: { part: keyof ReturnType<Counted['dump']>; suffix: string; what: string }[] = [
  { part: 'all', suffix: '', what: 'Instructions per request, all threads' },
  {
    part: 'main',
    suffix: ' (main thread)',
    what: "Instructions per request, the main thread's outside the collector",
  },
  {
    part: 'path',
    suffix: ' (request path)',
    what: "Instructions per request, the main thread's outside the collector and the optimising compiler",
  },
];

const percent = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)} %`;

/** One measure's table against off, and its verdict, unresolved when the two servers with tracing off differ by the target or more. */
function measureTables(figures: Figures, keys: string[], what: string, suffix: string): string[] {
  // A major collection lands in one round of several: the mean spreads its instructions over the
  // requests that made the garbage, where the median would drop them.
  const summary = instructions ? (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length : median;
  const show = (x: number) => (instructions ? `${(x / 1e6).toFixed(3)} M` : `${x.toFixed(0)} µs`);
  let worst = -Infinity;
  let spread = 0;
  const rows = LISTS.map(({ list }) => {
    const of = (key: string) => summary(figures.get(figureKey(`${list}${suffix}`, key)) ?? []);
    const off = of('off');
    worst = Math.max(worst, (of('10 %') - off) / off);
    spread = Math.max(spread, Math.abs(of('off again') - off) / off);
    return {
      List: list,
      [`${what}, off`]: show(off),
      ...Object.fromEntries(keys.map((k) => [k, show(of(k))])),
      ...Object.fromEntries(keys.map((k) => [`${k} against off`, percent((of(k) - off) / off)])),
    };
  });
  const resolved = spread < TARGET;
  return [
    ...table(rows),
    '',
    ...table([
      {
        Check: 'the two servers with tracing off, apart by',
        Measured: `${(spread * 100).toFixed(1)} %`,
        Target: `< ${String(TARGET * 100)} %, to resolve the next`,
        Verdict: `${mark(resolved)}${resolved ? '' : ': this run cannot tell'}`,
      },
      {
        Check: '10 % against off, on the list where it costs most',
        Measured: percent(worst),
        Target: `≤ +${String(TARGET * 100)} %`,
        Verdict: resolved ? mark(worst <= TARGET) : '–',
      },
    ]),
  ];
}

/** The service with a setting's tracing, under callgrind when counting instructions (its dumps in `dumps`). */
async function startSetting(
  { key, name, extra }: Setting,
  env: Record<string, string>,
  dumps: string,
): Promise<Contender & { counted?: Counted }> {
  const outFile = path.join(dumps, `${key.replace(' %', ' percent').replace(/\W+/g, '-')}.out`);
  const server = await startServer(
    'service/src/main.ts',
    { ...env, ...extra, ...(instructions ? UNDER_VALGRIND : {}) },
    instructions
      ? {
          node: 'valgrind',
          nodeArgs: [...callgrindArgs(outFile), node.path, ...V8_PREDICTABLE],
          withinMs: 600_000,
        }
      : { node: node.path },
  );
  const counted = instructions ? new Counted(server, outFile) : undefined;
  return { key, name, server, token: await benchToken(server.base), ...(counted ? { counted } : {}) };
}

async function main(): Promise<void> {
  const info = await seed(posts, false, log);
  const collector = await sinkCollector();
  const env = benchServiceEnv(info.database);
  const traced = (ratio: string) => ({
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: ratio,
  });
  const settings: Setting[] = [
    { key: 'off', name: 'tracing off', extra: {} },
    // A second server with tracing off: how far two identical servers differ here is the bench's
    // resolution, against which the others are read.
    { key: 'off again', name: 'tracing off, a second server', extra: {} },
    // The SDK loaded and every request declined at the door: what an unsampled request costs.
    ...(instructions ? [{ key: '0 %', name: 'no trace', extra: traced('0') }] : []),
    { key: '10 %', name: 'one trace in ten', extra: traced('0.1') },
    { key: '100 %', name: 'every trace', extra: traced('1') },
  ];
  const dumps = instructions ? mkdtempSync(path.join(os.tmpdir(), 'tracing-instructions-')) : '';
  const contenders: (Contender & { counted?: Counted })[] = [];
  const figures: Figures = new Map();
  try {
    for (const setting of settings) contenders.push(await startSetting(setting, env, dumps));
    const loadAverageAtStart = loadAverageText();
    if (instructions)
      await instructionRounds(
        contenders.map((c) => ({ ...c, counted: c.counted as Counted })),
        figures,
      );
    else await cpuRounds(contenders, figures);
    const run: Row = instructions
      ? {
          'Requests a round': requests,
          'Warm-up requests a list': warmup,
          'Settling rounds': settlingRounds,
          Node: `${node.version} under callgrind`,
          Dumps: dumps,
        }
      : {
          's a round': duration,
          Node: node.version,
          'Load average at the start': loadAverageAtStart,
          'Load average at the end': loadAverageText(),
        };
    const keys = settings.map((s) => s.key).filter((k) => k !== 'off');
    const measures = instructions ? COUNTED_MEASURES : [{ what: 'CPU per request', suffix: '' }];
    log(
      [
        '',
        ...table([
          {
            Posts: posts,
            Rounds: rounds,
            Connections: connections,
            ...run,
            'Batches exported': collector.batches(),
          },
        ]),
        ...measures.flatMap((m) => ['', ...measureTables(figures, keys, m.what, m.suffix)]),
        '',
      ].join('\n'),
    );
  } finally {
    await Promise.all(contenders.map((c) => c.server.stop()));
    collector.close();
  }
}

runMain(main);
