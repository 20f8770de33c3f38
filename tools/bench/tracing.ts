/**
 * `npm run bench:tracing -- [--posts 10000] [--rounds 5] [--duration 4] [--connections 10] [--node image|current|PATH]`
 *
 * What tracing costs: the same service four times on one seeded database, tracing off (no
 * OTEL_EXPORTER_OTLP_ENDPOINT) twice, sampling one trace in ten (parentbased_traceidratio at 0.1)
 * and every trace (at 1), the last two exporting OTLP/HTTP protobuf to a collector in this process
 * that reads and discards each batch. Alternating rounds (tools/bench/rounds.ts) on the public and
 * the signed-in list; prints the server's CPU per request, median of the rounds, and each against
 * off, the second server with tracing off included, as the measure of the bench's own spread. The
 * target is within 5 % of off at one in ten.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { startServer, median } from './measure';
import { serverNode } from './node';
import { alternatingRounds, benchToken, option, type Contender, type MeasuredList } from './rounds';
import { benchServiceEnv, seed } from '../harness/seed';

const posts = Number(option('posts', '10000'));
const rounds = Number(option('rounds', '5'));
const duration = Number(option('duration', '4'));
const connections = Number(option('connections', '10'));
const node = serverNode(option('node', 'image'));
if (
  ![10_000, 100_000, 1_000_000].includes(posts) ||
  !(rounds >= 1) ||
  !(duration >= 1) ||
  !(connections >= 1)
) {
  process.stderr.write(
    '--posts takes 10000, 100000 or 1000000; --rounds, --duration and --connections positive numbers\n',
  );
  process.exit(2);
}

const TARGET = 0.05;

const log = (line: string) => {
  process.stdout.write(`${line}\n`);
};

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

async function main(): Promise<void> {
  const info = await seed(posts, false, log);
  const collector = await sinkCollector();
  const env = benchServiceEnv(info.database);
  const traced = (ratio: string) => ({
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: ratio,
  });
  const settings = [
    { key: 'off', name: 'tracing off', extra: {} },
    // A second server with tracing off: how far two identical servers differ here is the bench's
    // resolution, against which the others are read.
    { key: 'off again', name: 'tracing off, a second server', extra: {} },
    { key: '10 %', name: 'one trace in ten', extra: traced('0.1') },
    { key: '100 %', name: 'every trace', extra: traced('1') },
  ];
  const contenders: Contender[] = [];
  const cpu = new Map<string, number[]>();
  try {
    for (const { key, name, extra } of settings) {
      const server = await startServer('service/src/main.ts', { ...env, ...extra }, { node: node.path });
      contenders.push({ key, name, server, token: await benchToken(server.base) });
    }
    const loadStart = os.loadavg()[0] ?? 0;
    await alternatingRounds(
      contenders,
      LISTS,
      { rounds, connectionCounts: [connections], duration, warmup: 1 },
      ({ round, list, contender, figures: f }) => {
        const key = `${list.list}\u0000${contender.key}`;
        cpu.set(key, [...(cpu.get(key) ?? []), f.cpuUsPerRequest ?? Number.NaN]);
        log(
          `round ${String(round + 1)}  ${list.list.padEnd(15)} ${contender.key.padEnd(9)} ${String(f.rps).padStart(6)} req/s  p50 ${String(f.p50)} ms  errors ${String(f.errors)}  non-2xx ${String(f.non2xx)}  CPU ${String(f.cpuUsPerRequest ?? '?')} µs/req`,
        );
      },
    );
    log('');
    log(
      `${String(posts)} posts, ${String(rounds)} rounds of ${String(duration)} s at ${String(connections)} connections; Node ${node.version}; load average ${loadStart.toFixed(2)} at the start, ${(os.loadavg()[0] ?? 0).toFixed(2)} at the end; ${String(collector.batches())} batches exported`,
    );
    log('');
    log(
      '| List | CPU per request, off | off again | at 10 % | at 100 % | off again against off | 10 % against off | 100 % against off |',
    );
    log('| --- | --- | --- | --- | --- | --- | --- | --- |');
    let missed = false;
    for (const { list } of LISTS) {
      const of = (key: string) => median(cpu.get(`${list}\u0000${key}`) ?? []);
      const off = of('off');
      const again = of('off again');
      const tenth = of('10 %');
      const all = of('100 %');
      const rel = (x: number) => `${x >= off ? '+' : ''}${(((x - off) / off) * 100).toFixed(1)} %`;
      if ((tenth - off) / off > TARGET) missed = true;
      log(
        `| ${list} | ${off.toFixed(0)} µs | ${again.toFixed(0)} µs | ${tenth.toFixed(0)} µs | ${all.toFixed(0)} µs | ${rel(again)} | ${rel(tenth)} | ${rel(all)} |`,
      );
    }
    log('');
    log(
      missed
        ? `At 10 % the CPU per request is more than ${String(TARGET * 100)} % above off on some list (target missed).`
        : `At 10 % the CPU per request is within ${String(TARGET * 100)} % of off on every list (target met).`,
    );
  } finally {
    await Promise.all(contenders.map((c) => c.server.stop()));
    collector.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
