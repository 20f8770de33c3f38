/** The figures of `npm run bench` (tools/bench/run.ts) and the Markdown tables it prints of them. */
import type { EndpointFigures } from './measure';

export type { EndpointFigures };

/** One rung of the ladder from the reference to the service (public list). */
export interface LadderStep {
  /** ladder.ts's LADDER_STEP, or 'reference' / 'service'. */
  key: string;
  name: string;
  /** The key of the rung this one adds to; its CPU cost is counted over that one. */
  basedOn?: string;
  figures: EndpointFigures;
}

/** Every endpoint on both servers at one connection count. */
export interface ConnectionRun {
  connections: number;
  service: Record<string, EndpointFigures>;
  reference: Record<string, EndpointFigures>;
}

/** One list at one depth: `?skip=<depth>`, and the same page through the cursor of the page before. */
export interface DeepPage {
  list: string;
  depth: number;
  offset: EndpointFigures;
  /** null when the page before gave no `Link: <...>; rel="next"` (no cursors served), or at depth 0. */
  cursor: EndpointFigures | null;
}

/** One performance target, as measured on one size. */
export interface Target {
  /** Stable across sizes (the rows of the overall table). */
  id: string;
  what: string;
  measured: string;
  target: string;
  met: boolean;
  /** Whether the stretch goal is met too, for targets that have one. */
  stretch?: boolean;
}

export interface SizeResult {
  posts: number;
  users: number;
  votes: number;
  measuredAt: string;
  duration: number;
  /** Seconds per deep-page run. */
  deepDuration: number;
  /** The counts the endpoint table was measured at; the ladder and deep pages use the first. */
  connections: number[];
  note?: string;
  machine: { cpus: string; memoryGb: number; node: string; postgres: string; loadAverage: number[] };
  runs: ConnectionRun[];
  ladder: LadderStep[];
  deepPages: DeepPage[];
  targets: Target[];
  liveDuringLogins: { p50: number; p99: number; loginRps: number };
  /** Median resident size (MB) through requests 10,000-20,000 and 90,000-100,000. */
  memory: { rss20k: number; rss100k: number };
  loginTiming: { unknownMedianMs: number; wrongPasswordMedianMs: number };
}

export const LISTS = ['public list', 'authenticated list'];
const isSearch = (name: string) => name.startsWith('search');
const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const signed = (n: number) => `${n < 0 ? '−' : '+'}${fmt(Math.abs(n))}`;
const mark = (ok: boolean) => (ok ? '✅ met' : '❌ missed');
const markTarget = (t: Target) => (t.stretch ? '✅ met, stretch too' : mark(t.met));
const cpu = (f: EndpointFigures | undefined) =>
  f?.cpuUsPerRequest === undefined ? '–' : fmt(f.cpuUsPerRequest);
/** The first count's run: the one the scaling tables and the checks read. */
const firstRun = (r: SizeResult): ConnectionRun =>
  r.runs[0] ?? { connections: 0, service: {}, reference: {} };

export const LIST_RATIO_TARGET = 0.75;
export const LIST_RATIO_STRETCH = 0.8;
export const CPU_RATIO_TARGET = 1.6;
export const CURSOR_TARGET = 1.5;

/**
 * The performance targets for one size: list throughput against the reference at every count, no
 * errors, and the public list's CPU per request against the reference's.
 */
export function targetsOf(r: Pick<SizeResult, 'runs'>): Target[] {
  const out: Target[] = [];
  for (const run of r.runs) {
    const c = run.connections;
    for (const name of LISTS) {
      const s = run.service[name];
      const ref = run.reference[name];
      const ratio = s && ref && ref.rps > 0 ? s.rps / ref.rps : Number.NaN;
      out.push({
        id: `${name} ratio @${String(c)}`,
        what: `${name}: service / reference req/s, ${String(c)} connections`,
        measured:
          s && ref && ref.rps > 0
            ? `${ratio.toFixed(2)} × (${fmt(s.rps)} / ${fmt(ref.rps)})`
            : 'not measured (no requests answered)',
        target: `≥ ${String(LIST_RATIO_TARGET)} × (stretch ${String(LIST_RATIO_STRETCH)})`,
        met: ratio >= LIST_RATIO_TARGET,
        stretch: ratio >= LIST_RATIO_STRETCH,
      });
    }
  }
  const failed = r.runs.flatMap((run) =>
    Object.entries(run.service)
      .filter(([, f]) => f.errors + f.non2xx > 0)
      .map(([name, f]) => `${name} @${String(run.connections)}: ${String(f.errors)} + ${String(f.non2xx)}`),
  );
  out.push({
    id: 'errors',
    what: 'errors and non-2xx answers, every service endpoint at every count',
    measured: failed.length === 0 ? '0' : failed.join('; '),
    target: '0',
    met: failed.length === 0,
  });
  for (const run of r.runs) {
    const s = run.service['public list']?.cpuUsPerRequest;
    const ref = run.reference['public list']?.cpuUsPerRequest;
    const known = s !== undefined && ref !== undefined && ref > 0;
    const ratio = known ? s / ref : Number.NaN;
    out.push({
      id: `cpu ratio @${String(run.connections)}`,
      what: `public list: service / reference CPU µs per request, ${String(run.connections)} connections`,
      measured: known
        ? `${ratio.toFixed(2)} × (${fmt(s)} / ${fmt(ref)} µs)`
        : 'not measured (no /proc, or no requests)',
      target: `≤ ${String(CPU_RATIO_TARGET)} ×`,
      met: ratio <= CPU_RATIO_TARGET,
    });
  }
  return out;
}

function targetTable(r: SizeResult): string[] {
  return [
    '| Target | Measured | Target | |',
    '|---|---|---|---|',
    ...r.targets.map((t) => `| ${t.what} | ${t.measured} | ${t.target} | ${markTarget(t)} |`),
  ];
}

/** Every size's targets side by side. */
function overallTargets(results: SizeResult[]): string[] {
  const ids: { id: string; what: string; target: string }[] = [];
  for (const r of results)
    for (const t of r.targets)
      if (!ids.some((x) => x.id === t.id)) ids.push({ id: t.id, what: t.what, target: t.target });
  if (ids.length === 0) return [];
  return [
    `| Target | ${results.map((r) => `${fmt(r.posts)} posts`).join(' | ')} |`,
    `|---|${results.map(() => '---').join('|')}|`,
    ...ids.map(({ id, what, target }) => {
      const cells = results.map((r) => {
        const t = r.targets.find((x) => x.id === id);
        return t ? `${markTarget(t)}: ${t.measured}` : '–';
      });
      return `| ${what} (${target}) | ${cells.join(' | ')} |`;
    }),
  ];
}

function table(run: ConnectionRun): string[] {
  const lines = [
    '| Endpoint | Service req/s | p50 ms | p99 ms | errors | non-2xx | CPU µs/req | Reference req/s | p50 ms | p99 ms | CPU µs/req | Service / reference req/s | Service / reference CPU µs/req |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const [name, s] of Object.entries(run.service)) {
    const ref = run.reference[name];
    const ratio = ref && ref.rps > 0 ? (s.rps / ref.rps).toFixed(2) : '–';
    const cpuRatio =
      s.cpuUsPerRequest !== undefined && ref?.cpuUsPerRequest
        ? (s.cpuUsPerRequest / ref.cpuUsPerRequest).toFixed(2)
        : '–';
    lines.push(
      `| ${name} | ${fmt(s.rps)} | ${String(s.p50)} | ${String(s.p99)} | ${String(s.errors)} | ${String(s.non2xx)} | ${cpu(s)} | ${ref ? fmt(ref.rps) : '–'} | ${ref ? String(ref.p50) : '–'} | ${ref ? String(ref.p99) : '–'} | ${cpu(ref)} | ${ratio} | ${cpuRatio} |`,
    );
  }
  return lines;
}

function checks(r: SizeResult): string[] {
  const growth = (r.memory.rss100k - r.memory.rss20k) / r.memory.rss20k;
  const { unknownMedianMs: u, wrongPasswordMedianMs: w } = r.loginTiming;
  const timingGap = Math.abs(u - w) / Math.min(u, w);
  const lines = [
    '| Check | Measured | Target | |',
    '|---|---|---|---|',
    `| \`/healthz/live\` p99 during 20 concurrent logins (${fmt(r.liveDuringLogins.loginRps)} logins/s) | ${String(r.liveDuringLogins.p99)} ms (p50 ${String(r.liveDuringLogins.p50)} ms) | < 50 ms | ${mark(r.liveDuringLogins.p99 < 50)} |`,
    `| Resident memory around 100,000 vs 20,000 requests (median of readings through the last 10,000) | ${fmt(r.memory.rss100k, 1)} MB vs ${fmt(r.memory.rss20k, 1)} MB (${growth >= 0 ? '+' : ''}${fmt(growth * 100, 1)} %) | within 20 % | ${mark(Math.abs(growth) <= 0.2)} |`,
    `| Login median: unknown e-mail vs wrong password | ${fmt(u)} ms vs ${fmt(w)} ms (${fmt(timingGap * 100, 1)} % apart) | within 15 % | ${mark(timingGap <= 0.15)} |`,
  ];
  if (r.posts === 100_000)
    for (const [name, s] of Object.entries(firstRun(r).service).filter(([n]) => isSearch(n)))
      lines.push(`| ${name} p50 at 100k posts | ${String(s.p50)} ms | < 15 ms | ${mark(s.p50 < 15)} |`);
  return lines;
}

/** p50 of the first page (depth 0, offset) of a list: what deeper cursor pages are held against. */
const firstPageP50 = (r: SizeResult, list: string) =>
  r.deepPages.find((d) => d.list === list && d.depth === 0)?.offset.p50;

/** Cursor p50 over the first page's p50, or undefined where either is missing. */
function cursorRatio(r: SizeResult, d: DeepPage): number | undefined {
  const first = firstPageP50(r, d.list);
  if (!d.cursor || first === undefined) return undefined;
  // autocannon reports whole milliseconds; a 0 ms first page is counted as 1 ms.
  return d.cursor.p50 / Math.max(first, 1);
}

function deepTable(r: SizeResult): string[] {
  if (r.deepPages.length === 0) return [];
  const f3 = (f: EndpointFigures | null) =>
    f ? [String(f.p50), String(f.p99), fmt(f.rps)] : ['–', '–', '–'];
  return [
    `**Deep pages** (service only, ${String(r.connections[0] ?? '?')} connections, ${String(r.deepDuration)} s each): \`?skip=<depth>\` against the same page reached through the \`Link: rel="next"\` cursor of the page before it ("–": no cursor served).`,
    '',
    `| List | Depth | Offset p50 ms | p99 ms | req/s | Cursor p50 ms | p99 ms | req/s | Cursor p50 ÷ first-page p50 | Target ≤ ${String(CURSOR_TARGET)} |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    ...r.deepPages.map((d) => {
      const ratio = cursorRatio(r, d);
      return `| ${d.list} | ${fmt(d.depth)} | ${f3(d.offset).join(' | ')} | ${f3(d.cursor).join(' | ')} | ${ratio === undefined ? '–' : ratio.toFixed(2)} | ${ratio === undefined ? '–' : mark(ratio <= CURSOR_TARGET)} |`;
    }),
  ];
}

interface StepFigures {
  step: LadderStep;
  /** CPU µs/req over the rung it builds on ('–' for the first rung or without /proc). */
  added: string;
  addedUs?: number;
  /** Throughput against the ladder's first rung, the reference. */
  ofReference: string;
}

/** Each rung with what it adds to the rung it builds on: the cost of each layer or piece. */
function stepsOf(r: SizeResult): StepFigures[] {
  const reference = r.ladder[0]?.figures;
  return r.ladder.map((step) => {
    const own = step.figures.cpuUsPerRequest;
    const before = r.ladder.find((s) => s.key === step.basedOn)?.figures.cpuUsPerRequest;
    const addedUs = own === undefined || before === undefined ? undefined : own - before;
    return {
      step,
      added: addedUs === undefined ? '–' : signed(addedUs),
      ...(addedUs === undefined ? {} : { addedUs }),
      ofReference: reference ? (step.figures.rps / reference.rps).toFixed(2) : '–',
    };
  });
}

/** Rungs that add one piece to bare Express (not the whole app on top of it). */
const singlePieces = (steps: StepFigures[]) =>
  steps.filter((s) => s.step.basedOn === 'express' && s.step.key !== 'app');

function ladderTable(r: SizeResult): string[] {
  const steps = stepsOf(r);
  if (steps.length === 0) return [];
  const pieces = singlePieces(steps);
  const app = steps.find((s) => s.step.key === 'app');
  const sum = pieces.reduce((t, s) => t + (s.addedUs ?? 0), 0);
  return [
    `**The public list, one layer at a time** (each rung measured after the other, same data, ${String(r.connections[0] ?? '?')} connections; the rungs "express + …" each add exactly one piece of the app to bare Express):`,
    '',
    '| Rung | Builds on | req/s | p50 ms | CPU µs/req | CPU µs/req over what it builds on | req/s × reference |',
    '|---|---|---:|---:|---:|---:|---:|',
    ...steps.map(
      ({ step, added, ofReference }, i) =>
        `| ${String(i + 1)}. ${step.name} | ${step.basedOn ?? '–'} | ${fmt(step.figures.rps)} | ${String(step.figures.p50)} | ${cpu(step.figures)} | ${added} | ${ofReference} |`,
    ),
    '',
    ...(pieces.length > 0 && app?.addedUs !== undefined
      ? [
          `The ${String(pieces.length)} pieces measured alone add ${signed(sum)} µs together; the whole app adds ${signed(app.addedUs)} µs over bare Express (the rest: validation, the other routers, the error handlers, and how the pieces interact).`,
          '',
        ]
      : []),
  ];
}

function scaling(results: SizeResult[]): string[] {
  const small = results.find((r) => r.posts === 10_000);
  const large = results.find((r) => r.posts === 1_000_000);
  if (!small || !large) return ['Needs 10,000 and 1,000,000 posts in the same run.'];
  const lines = [
    `| Endpoint (${String(firstRun(large).connections)} connections) | p50 at 10k | p50 at 1M | Ratio | Target ≤ 1.5 × |`,
    '|---|---:|---:|---:|---|',
  ];
  for (const name of Object.keys(firstRun(large).service).filter((n) => LISTS.includes(n) || isSearch(n))) {
    const a = firstRun(small).service[name];
    const b = firstRun(large).service[name];
    if (!a || !b) continue;
    const ratio = b.p50 / Math.max(a.p50, 1);
    lines.push(
      `| ${name} | ${String(a.p50)} ms | ${String(b.p50)} ms | ${ratio.toFixed(2)} × | ${mark(ratio <= 1.5)} |`,
    );
  }
  return lines;
}

/** p50 of every endpoint but login (bcrypt sets its latency, not the posts) at every size. */
function p50Table(results: SizeResult[]): string[] {
  const service = (r: SizeResult) => firstRun(r).service;
  const names = Object.keys(results[0] ? service(results[0]) : {}).filter((n) => !n.startsWith('login'));
  if (names.length === 0) return [];
  return [
    `p50 ms of every endpoint but login, by posts in the database (${String(results[0] ? firstRun(results[0]).connections : '?')} connections):`,
    '',
    `| Endpoint | ${results.map((r) => `${fmt(r.posts)} posts`).join(' | ')} |`,
    `|---|${results.map(() => '---:').join('|')}|`,
    ...names.map((n) => `| ${n} | ${results.map((r) => String(service(r)[n]?.p50 ?? '–')).join(' | ')} |`),
  ];
}

/** Every size's ladder side by side: what each rung adds, and where that leaves the throughput. */
function ladderSummary(results: SizeResult[]): string[] {
  const ladders = results.filter((r) => r.ladder.length).map((r) => ({ posts: r.posts, steps: stepsOf(r) }));
  const rungs = ladders[0]?.steps.map(({ step }) => step) ?? [];
  if (rungs.length === 0) return [];
  const cell = (steps: StepFigures[], key: string) => {
    const found = steps.find((s) => s.step.key === key);
    if (!found) return '–';
    const own = found.step.basedOn === undefined ? fmt(found.step.figures.cpuUsPerRequest ?? 0) : found.added;
    return `${own} µs, ${found.ofReference} ×`;
  };
  return [
    '## The ladder at every size',
    '',
    'CPU per request each rung adds over the rung it builds on, and the throughput it leaves against the reference:',
    '',
    `| Rung | ${ladders.map((l) => `${fmt(l.posts)} posts`).join(' | ')} |`,
    `|---|${ladders.map(() => '---:').join('|')}|`,
    ...rungs.map(
      (rung, i) =>
        `| ${String(i + 1)}. ${rung.name} | ${ladders.map((l) => cell(l.steps, rung.key)).join(' | ')} |`,
    ),
    '',
  ];
}

/** One size's tables, as printed once it is measured. */
export function sizeTables(r: SizeResult): string[] {
  const md = [
    `## ${fmt(r.posts)} posts`,
    '',
    `${fmt(r.users)} users, ${fmt(r.votes)} votes. Measured ${r.measuredAt} on ${r.machine.cpus}, ${String(r.machine.memoryGb)} GB, servers on Node ${r.machine.node}, PostgreSQL ${r.machine.postgres}; load average ${r.machine.loadAverage.join(' / ')} when it ended; ${r.connections.join(' and ')} connections, ${String(r.duration)} s per endpoint.`,
    '',
  ];
  if (r.note) md.push(`> ${r.note}`, '');
  md.push(...targetTable(r), '');
  for (const run of r.runs) md.push(`**${String(run.connections)} connections:**`, '', ...table(run), '');
  md.push(...checks(r), '');
  md.push(...ladderTable(r));
  const deep = deepTable(r);
  if (deep.length > 0) md.push(...deep, '');
  return md;
}

/** A row of the headline table: its label, then one cell per size. */
const headlineRow = (results: SizeResult[], label: string, cell: (r: SizeResult) => string) =>
  `| ${label} | ${results.map((r) => cell(r)).join(' | ')} |`;

/** The size's run at `c` connections, if it was measured at that count. */
const runAt = (r: SizeResult, c: number) => r.runs.find((run) => run.connections === c);

/** Each list's throughput, and its ratio to the reference, at every connection count. */
function throughputRows(results: SizeResult[], counts: number[]): string[] {
  const rows: string[] = [];
  for (const c of counts)
    for (const name of LISTS) {
      rows.push(
        headlineRow(results, `${name} req/s (p50), ${String(c)} connections`, (r) => {
          const f = runAt(r, c)?.service[name];
          return f ? `${fmt(f.rps)} (${String(f.p50)} ms)` : '–';
        }),
        headlineRow(
          results,
          `${name} vs bare \`node:http\` + \`pg\`, ${String(c)} connections (target ≥ ${String(LIST_RATIO_TARGET)}, stretch ${String(LIST_RATIO_STRETCH)})`,
          (r) => {
            const s = runAt(r, c)?.service[name];
            const ref = runAt(r, c)?.reference[name];
            return s && ref && ref.rps > 0 ? (s.rps / ref.rps).toFixed(2) : '–';
          },
        ),
      );
    }
  return rows;
}

/** The public list's server CPU per request against the reference's, at every connection count. */
function cpuRows(results: SizeResult[], counts: number[]): string[] {
  return counts.map((c) =>
    headlineRow(
      results,
      `server CPU per request, public list, service / reference, ${String(c)} connections (target ≤ ${String(CPU_RATIO_TARGET)} ×)`,
      (r) => {
        const s = runAt(r, c)?.service['public list']?.cpuUsPerRequest;
        const ref = runAt(r, c)?.reference['public list']?.cpuUsPerRequest;
        return s !== undefined && ref ? `${fmt(s)} / ${fmt(ref)} µs (${(s / ref).toFixed(2)} ×)` : '–';
      },
    ),
  );
}

/** Each list's deepest page: offset against cursor p50, and the cursor against the first page. */
function deepestPageRows(results: SizeResult[]): string[] {
  return LISTS.map((name) =>
    headlineRow(
      results,
      `${name}, deepest page measured: offset / cursor p50 (cursor ÷ first page, target ≤ ${String(CURSOR_TARGET)})`,
      (r) => {
        const deepest = r.deepPages.filter((d) => d.list === name).sort((a, b) => b.depth - a.depth)[0];
        if (!deepest) return '–';
        const ratio = cursorRatio(r, deepest);
        const cursorText = deepest.cursor
          ? `cursor ${String(deepest.cursor.p50)} ms (${ratio === undefined ? '–' : `${ratio.toFixed(2)} ×`})`
          : 'cursor –';
        return `depth ${fmt(deepest.depth)}: offset ${String(deepest.offset.p50)} ms, ${cursorText}`;
      },
    ),
  );
}

/** Errors, search, the bare-Express rung and the checks (liveness, memory, login timing). */
function checkRows(results: SizeResult[]): string[] {
  const row = (label: string, cell: (r: SizeResult) => string) => headlineRow(results, label, cell);
  return [
    row(
      'errors and non-2xx answers (target 0)',
      (r) => r.targets.find((t) => t.id === 'errors')?.measured ?? '–',
    ),
    row('search p50, rare / common word', (r) => {
      const s = firstRun(r).service;
      const [rare, common] = Object.keys(s)
        .filter(isSearch)
        .map((n) => s[n]?.p50);
      return `${String(rare ?? '–')} / ${String(common ?? '–')} ms`;
    }),
    row('bare Express 5 + knex, no middleware, vs reference (ladder)', (r) => {
      const reference = r.ladder.find((step) => step.key === 'reference')?.figures.rps;
      const express = r.ladder.find((step) => step.key === 'express')?.figures.rps;
      return reference && express !== undefined ? (express / reference).toFixed(2) : '–';
    }),
    row(
      '`/healthz/live` p99 during 20 logins (target < 50 ms)',
      (r) => `${String(r.liveDuringLogins.p99)} ms`,
    ),
    row('memory through 100k vs 20k requests (target within 20 %)', (r) => {
      const growth = ((r.memory.rss100k - r.memory.rss20k) / r.memory.rss20k) * 100;
      return `${growth < 0 ? '−' : '+'}${fmt(Math.abs(growth), 1)} %`;
    }),
    row('login median, unknown e-mail vs wrong password (target within 15 %)', (r) => {
      const { unknownMedianMs: u, wrongPasswordMedianMs: w } = r.loginTiming;
      return `${fmt((Math.abs(u - w) / Math.min(u, w)) * 100, 1)} %`;
    }),
  ];
}

/** The headline figures, one column per size. */
function headlineFigures(results: SizeResult[]): string[] {
  const counts = [...new Set(results.flatMap((r) => r.connections))];
  const first = results[0];
  return [
    `Latest run${first ? ` (${first.measuredAt.slice(0, 10)})` : ''}, on ${first?.machine.cpus ?? '?'} (service, PostgreSQL and load generator sharing it), ${String(first?.duration ?? '?')} s per endpoint:`,
    '',
    `| | ${results.map((r) => `${fmt(r.posts)} posts`).join(' | ')} |`,
    `|---|${results.map(() => '---:').join('|')}|`,
    ...throughputRows(results, counts),
    ...cpuRows(results, counts),
    ...deepestPageRows(results),
    ...checkRows(results),
  ];
}

/** The tables across every size of the run, as printed at its end. */
export function acrossSizes(results: SizeResult[]): string[] {
  const overall = overallTargets(results);
  return [
    '## Headline figures',
    '',
    ...headlineFigures(results),
    '',
    ...(overall.length > 0 ? ['## Targets', '', ...overall, ''] : []),
    '## Latency from 10,000 to 1,000,000 posts',
    '',
    ...scaling(results),
    '',
    ...p50Table(results),
    '',
    ...ladderSummary(results),
  ];
}
