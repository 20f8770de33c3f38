import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { parse } from 'yaml';
import { scrape, sumOf } from '../../tools/harness/metrics-text';
import { pollUntil } from '../../tools/harness/poll';
import {
  account,
  call,
  report,
  scratchDatabase,
  sleep,
  startService,
  type Answer,
  type ServiceProcess,
} from './support';

/** The API container's memory limit, which the service runs under here as in its pod. */
const POD_LIMIT_BYTES = mebibytes(
  (
    parse(readFileSync(path.join(__dirname, '../../chart/values.yaml'), 'utf8')) as {
      resources: { limits: { memory: string } };
    }
  ).resources.limits.memory,
);
/**
 * What the process may grow by under the attack below: the answers it holds for clients that do
 * not read (UNSENT_ANSWER_BYTES), those in the making and the garbage collector's slack, with the
 * heap Node sizes from the pod's limit (docs/security.md, "Memory per connection").
 */
const GROWTH_BOUND_BYTES = 200 * 1024 * 1024;
const SOCKETS = 100;
const PIPELINED = 10;
const PAGE = '/posts/public?limit=100';
/**
 * The largest page the content rule allows: 100 posts of the longest title and content, each
 * character three bytes in UTF-8 (the most any allowed character takes in JSON).
 */
const WIDE = '\u20ac';
const LARGEST_PAGE_BYTES = 6_000_000;

function mebibytes(quantity: string): number {
  const mi = /^(\d+)Mi$/.exec(quantity)?.[1];
  if (mi === undefined) throw new Error(`resources.limits.memory ${quantity}: expected a whole number of Mi`);
  return Number(mi) * 2 ** 20;
}

const database = scratchDatabase('pipelining');
let svc: ServiceProcess;

/**
 * The service's resident memory, read by the kernel's account (/proc), not asked of the process:
 * a process busy with the attack would answer its own metrics late.
 */
function residentBytes(): number {
  let status: string;
  try {
    status = readFileSync(`/proc/${svc.pid}/status`, 'utf8');
  } catch (error) {
    throw new Error('the service process is gone: killed at its memory limit?', { cause: error });
  }
  const kB = /^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1];
  if (kB === undefined) throw new Error('no VmRSS for the service process');
  return Number(kB) * 1024;
}

/** The sum of the samples of one of the service's metrics whose labels include every fragment. */
const metric = async (name: string, ...fragments: string[]): Promise<number> =>
  sumOf(await scrape(svc.metricsPort), name, ...fragments);

/** A connection that sends `count` requests for the page at once and never reads a byte. */
function neverReading(port: number, count: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    // Paused before it connects, the socket never reads: the answers pile up in the kernel's
    // buffers (a receive window that never opens) and then wherever the server keeps them.
    socket.pause();
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      socket.on('error', () => undefined);
      socket.write(`GET ${PAGE} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`.repeat(count));
      resolve(socket);
    });
  });
}

beforeAll(async () => {
  // In a memory cgroup of the pod's limit: the kernel enforces it, and V8 sizes its heap from it.
  svc = await startService({ DB_NAME: database.name }, undefined, { memoryLimitBytes: POD_LIMIT_BYTES });
  const token = await account(svc.base, 'big-pages@example.com');
  for (let i = 0; i < 100; i++) {
    const created = await call(svc.base, '/posts/', {
      token,
      json: { title: `${i} `.padEnd(300, WIDE), content: WIDE.repeat(20_000) },
    });
    if (created.status !== 201) throw new Error(`create post: ${created.status}`);
  }
});

test('When 100 connections each pipeline 10 requests for the largest page (6 MB) and never read, then memory stays under the pod limit and other clients are answered', async () => {
  const page = await call(svc.base, PAGE);
  expect(page.status).toBe(200);
  // The bytes sent: sendJson writes JSON.stringify's text as UTF-8.
  const pageBytes = Buffer.byteLength(JSON.stringify(page.body));
  expect(pageBytes).toBeGreaterThan(LARGEST_PAGE_BYTES);

  const before = residentBytes();
  let peak = before;
  // Sampled from a timer, so the peak is seen whatever the test awaits meanwhile.
  const sampler = setInterval(() => {
    peak = Math.max(peak, residentBytes());
  }, 100);

  const sockets: net.Socket[] = [];
  let other: Answer | undefined;
  try {
    const started = performance.now();
    for (let i = 0; i < SOCKETS; i++) sockets.push(await neverReading(svc.port, PIPELINED));
    const sentMs = performance.now() - started;
    // Until the server has done what it will do with them: memory no longer rising.
    let settledAt = performance.now();
    let settledPeak = peak;
    while (performance.now() - settledAt < 5_000 && performance.now() - started < 120_000) {
      await sleep(250);
      if (peak > settledPeak + 5 * 2 ** 20) {
        settledPeak = peak;
        settledAt = performance.now();
      }
    }
    const settledMs = performance.now() - started;
    // Another client, while all of that is held.
    other = await call(svc.base, '/posts/public?limit=1', { timeoutMs: 20_000 });
    report('pipelined never-reading clients', {
      sockets: SOCKETS,
      pipelined: PIPELINED,
      pageBytes,
      sentMs: Math.round(sentMs),
      settledMs: Math.round(settledMs),
      rssBeforeMB: Math.round(before / 2 ** 20),
      rssPeakMB: Math.round(peak / 2 ** 20),
      growthMB: Math.round((peak - before) / 2 ** 20),
      otherClientMs: Math.round(other.ms),
    });
  } finally {
    clearInterval(sampler);
    for (const socket of sockets) socket.destroy();
  }

  expect(other.status).toBe(200);
  expect(other.ms).toBeLessThan(5_000);

  // Every one of those requests has left the in-flight gauge once its connection is gone, and is
  // counted: answered (200) or given up by its client (499).
  const inFlight = () => metric('http_requests_in_flight');
  const { value: left } = await pollUntil(inFlight, (n) => n === 0, { withinMs: 10_000, everyMs: 100 });
  expect(left).toBe(0);
  // Each request is counted once: answered (200, or 503 when the pool was too busy for it), or
  // given up by its client (499), also the ones that never reached a route before their turn.
  const counted = (...labels: string[]) =>
    metric('http_request_duration_seconds_count', 'method="GET"', ...labels);
  const all = (await counted()) - 2;
  const answered = await counted('route="/posts/public"', 'status_code="200"');
  const abandoned = await counted('status_code="499"');
  const beforeTheirTurn = await counted('route="unmatched"', 'status_code="499"');
  report('pipelined never-reading clients, counted', {
    all,
    answered: answered - 2,
    abandoned,
    abandonedBeforeTheirTurn: beforeTheirTurn,
  });
  expect(all).toBe(SOCKETS * PIPELINED);
  expect(abandoned).toBeGreaterThan(0);
  expect(peak).toBeLessThan(POD_LIMIT_BYTES);
  expect(peak - before).toBeLessThan(GROWTH_BOUND_BYTES);
});
