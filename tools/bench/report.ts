/** The figures of `npm run bench` (tools/bench/run.ts) and the Markdown tables it prints of them. */
import { fmt, mark, section, table, type Row } from './common';
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
  /** machine()'s cells. */
  machine: Row;
  runs: ConnectionRun[];
  ladder: LadderStep[];
  deepPages: DeepPage[];
  targets: Target[];
  liveDuringLogins: { p50: number; p99: number; loginRps: number };
  /** Median resident size (MB) through the second tenth of `requests` and through the last tenth. */
  memory: { requests: number; early: number; late: number };
  loginTiming: { unknownMedianMs: number; wrongPasswordMedianMs: number };
}

const LISTS = ['public list', 'authenticated list'];
const isSearch = (name: string) => name.startsWith('search');
const signed = (n: number) => `${n < 0 ? '−' : '+'}${fmt(Math.abs(n))}`;
const markTarget = (t: Target) => (t.stretch ? '✅ met, stretch too' : mark(t.met));
const cpu = (f: EndpointFigures | undefined) => f?.cpuUsPerRequest ?? '–';
/** The first count's run: the one the scaling tables and the checks read. */
const firstRun = (r: SizeResult): ConnectionRun =>
  r.runs[0] ?? { connections: 0, service: {}, reference: {} };
const postsColumn = (r: SizeResult) => `${fmt(r.posts)} posts`;

const LIST_RATIO_TARGET = 0.75;
const LIST_RATIO_STRETCH = 0.8;
const CPU_RATIO_TARGET = 1.6;
const CURSOR_TARGET = 1.5;

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

/** The targets, a column per size: with one size, that size's verdicts. */
function targetTable(results: SizeResult[]): string[] {
  const rows = new Map<string, Row>();
  for (const r of results)
    for (const t of r.targets) {
      const row = rows.get(t.id) ?? { Target: `${t.what} (${t.target})` };
      row[postsColumn(r)] = `${markTarget(t)}: ${t.measured}`;
      rows.set(t.id, row);
    }
  return table([...rows.values()]);
}

function endpointTable(run: ConnectionRun): string[] {
  return table(
    Object.entries(run.service).map(([name, s]) => {
      const ref = run.reference[name];
      return {
        Endpoint: name,
        'Service req/s': s.rps,
        'p50 ms': s.p50,
        'p99 ms': s.p99,
        errors: s.errors,
        'non-2xx': s.non2xx,
        'CPU µs/req': cpu(s),
        'Reference req/s': ref?.rps ?? '–',
        'Reference p50 ms': ref?.p50 ?? '–',
        'Reference p99 ms': ref?.p99 ?? '–',
        'Reference CPU µs/req': cpu(ref),
        'Service / reference req/s': ref && ref.rps > 0 ? (s.rps / ref.rps).toFixed(2) : '–',
        'Service / reference CPU µs/req':
          s.cpuUsPerRequest !== undefined && ref?.cpuUsPerRequest
            ? (s.cpuUsPerRequest / ref.cpuUsPerRequest).toFixed(2)
            : '–',
      };
    }),
  );
}

function checkTable(r: SizeResult): string[] {
  const { requests, early, late } = r.memory;
  const growth = (late - early) / early;
  const { unknownMedianMs: u, wrongPasswordMedianMs: w } = r.loginTiming;
  const timingGap = Math.abs(u - w) / Math.min(u, w);
  const live = r.liveDuringLogins;
  const rows: Row[] = [
    {
      Check: `\`/healthz/live\` p99 during 20 concurrent logins (${fmt(live.loginRps)} logins/s)`,
      Measured: `${String(live.p99)} ms (p50 ${String(live.p50)} ms)`,
      Target: '< 50 ms',
      Verdict: mark(live.p99 < 50),
    },
    {
      Check: `Resident memory around ${fmt(requests)} vs ${fmt(requests / 5)} requests (median of readings through the last ${fmt(requests / 10)})`,
      Measured: `${fmt(late, 1)} MB vs ${fmt(early, 1)} MB (${growth >= 0 ? '+' : ''}${fmt(growth * 100, 1)} %)`,
      Target: 'within 20 %',
      Verdict: mark(Math.abs(growth) <= 0.2),
    },
    {
      Check: 'Login median: unknown e-mail vs wrong password',
      Measured: `${fmt(u)} ms vs ${fmt(w)} ms (${fmt(timingGap * 100, 1)} % apart)`,
      Target: 'within 15 %',
      Verdict: mark(timingGap <= 0.15),
    },
  ];
  if (r.posts === 100_000)
    for (const [name, s] of Object.entries(firstRun(r).service).filter(([n]) => isSearch(n)))
      rows.push({
        Check: `${name} p50 at 100k posts`,
        Measured: `${String(s.p50)} ms`,
        Target: '< 15 ms',
        Verdict: mark(s.p50 < 15),
      });
  return table(rows);
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
  return table(
    r.deepPages.map((d) => {
      const ratio = cursorRatio(r, d);
      return {
        List: d.list,
        Depth: d.depth,
        'Offset p50 ms': d.offset.p50,
        'Offset p99 ms': d.offset.p99,
        'Offset req/s': d.offset.rps,
        'Cursor p50 ms': d.cursor?.p50 ?? '–',
        'Cursor p99 ms': d.cursor?.p99 ?? '–',
        'Cursor req/s': d.cursor?.rps ?? '–',
        'Cursor p50 ÷ first-page p50': ratio === undefined ? '–' : ratio.toFixed(2),
        [`Target ≤ ${String(CURSOR_TARGET)}`]: ratio === undefined ? '–' : mark(ratio <= CURSOR_TARGET),
      };
    }),
  );
}

/** Each rung with the CPU µs/req it adds to the rung it builds on, and its throughput against the first rung, the reference. */
function rungsOf(r: SizeResult) {
  const reference = r.ladder[0]?.figures;
  return r.ladder.map((step) => {
    const own = step.figures.cpuUsPerRequest;
    const before = r.ladder.find((s) => s.key === step.basedOn)?.figures.cpuUsPerRequest;
    return {
      step,
      addedUs: own === undefined || before === undefined ? undefined : own - before,
      ofReference: reference ? (step.figures.rps / reference.rps).toFixed(2) : '–',
    };
  });
}

/** The ladder, and what the rungs that add one piece to bare Express add together (the whole app is a rung of its own). */
function ladderTable(r: SizeResult): string[] {
  const rungs = rungsOf(r);
  const rows: Row[] = rungs.map(({ step, addedUs, ofReference }, i) => ({
    Rung: `${String(i + 1)}. ${step.name}`,
    'Builds on': step.basedOn ?? '–',
    'req/s': step.figures.rps,
    'p50 ms': step.figures.p50,
    'CPU µs/req': cpu(step.figures),
    'CPU µs/req over what it builds on': addedUs === undefined ? '–' : signed(addedUs),
    'req/s × reference': ofReference,
  }));
  const pieces = rungs.filter((s) => s.step.basedOn === 'express' && s.step.key !== 'app');
  if (pieces.length > 0 && rungs.some((s) => s.step.key === 'app' && s.addedUs !== undefined))
    rows.push({
      Rung: `the ${String(pieces.length)} "express + …" rungs together`,
      'Builds on': 'express',
      'CPU µs/req over what it builds on': signed(pieces.reduce((t, s) => t + (s.addedUs ?? 0), 0)),
    });
  return table(rows);
}

function scalingTable(results: SizeResult[]): string[] {
  const small = results.find((r) => r.posts === 10_000);
  const large = results.find((r) => r.posts === 1_000_000);
  if (!small || !large) return [];
  const names = Object.keys(firstRun(large).service).filter((n) => LISTS.includes(n) || isSearch(n));
  return table(
    names.flatMap((name) => {
      const a = firstRun(small).service[name];
      const b = firstRun(large).service[name];
      if (!a || !b) return [];
      const ratio = b.p50 / Math.max(a.p50, 1);
      return [
        {
          [`Endpoint (${String(firstRun(large).connections)} connections)`]: name,
          'p50 at 10k': `${String(a.p50)} ms`,
          'p50 at 1M': `${String(b.p50)} ms`,
          Ratio: `${ratio.toFixed(2)} ×`,
          'Target ≤ 1.5 ×': mark(ratio <= 1.5),
        },
      ];
    }),
  );
}

/** p50 of every endpoint but login (bcrypt sets its latency, not the posts) at every size. */
function p50Table(results: SizeResult[]): string[] {
  const first = results[0];
  const names = Object.keys(first ? firstRun(first).service : {}).filter((n) => !n.startsWith('login'));
  return table(
    names.map((n) => ({
      [`p50 ms, ${String(first ? firstRun(first).connections : '?')} connections`]: n,
      ...Object.fromEntries(results.map((r) => [postsColumn(r), firstRun(r).service[n]?.p50 ?? '–'])),
    })),
  );
}

/** Every size's ladder side by side: what each rung adds, and where that leaves the throughput. */
function ladderSummary(results: SizeResult[]): string[] {
  const ladders = results.filter((r) => r.ladder.length).map((r) => ({ r, rungs: rungsOf(r) }));
  return table(
    (ladders[0]?.rungs ?? []).map(({ step }, i) => {
      const row: Row = { 'Rung: CPU µs/req it adds, req/s × reference': `${String(i + 1)}. ${step.name}` };
      for (const { r, rungs } of ladders) {
        const found = rungs.find((s) => s.step.key === step.key);
        const own = found?.step.basedOn === undefined ? found?.step.figures.cpuUsPerRequest : found.addedUs;
        row[postsColumn(r)] = !found
          ? '–'
          : `${own === undefined ? '–' : found.step.basedOn === undefined ? fmt(own) : signed(own)} µs, ${found.ofReference} ×`;
      }
      return row;
    }),
  );
}

/** One size's tables, as printed once it is measured. */
export function sizeTables(r: SizeResult): string[] {
  const first = String(r.connections[0] ?? '?');
  return [
    ...section(
      `## ${fmt(r.posts)} posts`,
      table([
        {
          Users: r.users,
          Votes: r.votes,
          Measured: r.measuredAt,
          ...r.machine,
          Connections: r.connections.join(', '),
          's per endpoint': r.duration,
        },
      ]),
      r.note ? [`> ${r.note}`] : [],
      targetTable([r]),
    ),
    ...r.runs.flatMap((run) => section(`### ${String(run.connections)} connections`, endpointTable(run))),
    ...checkTable(r),
    '',
    ...section(`### The public list, one layer at a time (${first} connections)`, ladderTable(r)),
    ...section(
      `### Deep pages, service only (${first} connections, ${String(r.deepDuration)} s each)`,
      deepTable(r),
    ),
  ];
}

/** The tables across the sizes of the run, as printed at its end; one size's are its own tables. */
export function acrossSizes(results: SizeResult[]): string[] {
  if (results.length < 2) return [];
  return [
    ...section('## Targets', targetTable(results)),
    ...section('## Latency from 10,000 to 1,000,000 posts', scalingTable(results), p50Table(results)),
    ...section('## The ladder at every size', ladderSummary(results)),
  ];
}
