/** The figures of `npm run bench:limit` (tools/bench/limit.ts), and the Markdown tables it prints of them. */
import { median } from './measure';

/** Every list's service / limit req/s, median of the rounds, at every count. */
export const LIMIT_RATIO_TARGET = 0.75;
/** The signed-in list's ratio to the limit within this fraction of the public list's. */
export const SIGNED_IN_GAP_TARGET = 0.1;

/** The three servers: the service, the library reference and the physical limit. */
export type LimitKey = 'service' | 'reference' | 'limit';

/** One server on one list at one count, over the rounds (index i: round i). */
export interface LimitSeries {
  key: LimitKey;
  list: string;
  signedIn: boolean;
  connections: number;
  rps: number[];
  /** The server process's CPU time per request in each round (µs). */
  cpuUs: number[];
  p50: number[];
  errors: number;
  non2xx: number;
}

export interface LimitResult {
  measuredAt: string;
  posts: number;
  duration: number;
  rounds: number;
  note?: string;
  machine: {
    cpus: string;
    memoryGb: number;
    node: string;
    postgres: string;
    /** The 1, 5 and 15 minute load averages when the rounds began and when they ended. */
    loadAverage: { start: number[]; end: number[] };
  };
  series: LimitSeries[];
}

const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** Round by round a / b, for the rounds both measured. */
const roundRatios = (a: number[], b: number[]): number[] =>
  a.flatMap((x, i) => {
    const y = b[i];
    return y !== undefined && y > 0 ? [x / y] : [];
  });

/** A ratio's median over the rounds and their spread. */
export interface Ratio {
  median: number;
  min: number;
  max: number;
}
const ratioOf = (rs: number[]): Ratio | undefined =>
  rs.length === 0 ? undefined : { median: median(rs), min: Math.min(...rs), max: Math.max(...rs) };
const ratioText = (r: Ratio | undefined) =>
  r ? `**${r.median.toFixed(2)}** (${r.min.toFixed(2)}–${r.max.toFixed(2)})` : '–';

/** The service against the limit and the reference, each list at each count. */
export interface LimitRow {
  list: string;
  signedIn: boolean;
  connections: number;
  service?: LimitSeries;
  reference?: LimitSeries;
  limit?: LimitSeries;
  ofLimit?: Ratio;
  ofReference?: Ratio;
  cpuOfLimit?: Ratio;
}

export function limitRows(r: LimitResult): LimitRow[] {
  const shapes = [...new Set(r.series.map((s) => `${String(s.connections)}|${s.list}`))];
  return shapes.map((shape) => {
    const [c = '', list = ''] = shape.split('|');
    const connections = Number(c);
    const find = (key: LimitKey) =>
      r.series.find((s) => s.key === key && s.list === list && s.connections === connections);
    const service = find('service');
    const reference = find('reference');
    const limit = find('limit');
    return {
      list,
      signedIn: service?.signedIn ?? false,
      connections,
      service,
      reference,
      limit,
      ofLimit: service && limit ? ratioOf(roundRatios(service.rps, limit.rps)) : undefined,
      ofReference: service && reference ? ratioOf(roundRatios(service.rps, reference.rps)) : undefined,
      cpuOfLimit: service && limit ? ratioOf(roundRatios(service.cpuUs, limit.cpuUs)) : undefined,
    };
  });
}

/** Each count's signed-in list ratio to the limit over the public list's (1 = the same share). */
export function signedInGaps(rows: LimitRow[]): { connections: number; gap: number }[] {
  return [...new Set(rows.map((row) => row.connections))].flatMap((connections) => {
    const at = rows.filter((row) => row.connections === connections && !row.list.includes('search'));
    const pub = at.find((row) => !row.signedIn)?.ofLimit;
    const signed = at.find((row) => row.signedIn)?.ofLimit;
    return pub && signed ? [{ connections, gap: signed.median / pub.median }] : [];
  });
}

/** The table and the targets, as Markdown. */
function limitLines(r: LimitResult): string[] {
  const rows = limitRows(r);
  const med = (s: LimitSeries | undefined, pick: (s: LimitSeries) => number[]) =>
    s ? fmt(median(pick(s))) : '–';
  const failed = r.series.filter((s) => s.errors + s.non2xx > 0);
  const mark = (ok: boolean) => (ok ? '✅ met' : '❌ missed');
  const lines = [
    `| List | Connections | Service req/s | Reference req/s | Limit req/s | Service / limit req/s | Service / reference req/s | CPU µs/req service / limit | Target ≥ ${String(LIMIT_RATIO_TARGET)} of the limit |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---|',
    ...rows.map(
      (row) =>
        `| ${row.list} | ${String(row.connections)} | ${med(row.service, (s) => s.rps)} | ${med(row.reference, (s) => s.rps)} | ${med(row.limit, (s) => s.rps)} | ${ratioText(row.ofLimit)} | ${ratioText(row.ofReference)} | ${med(row.service, (s) => s.cpuUs)} / ${med(row.limit, (s) => s.cpuUs)} (${row.cpuOfLimit ? row.cpuOfLimit.median.toFixed(2) : '–'} ×) | ${row.ofLimit ? mark(row.ofLimit.median >= LIMIT_RATIO_TARGET) : '–'} |`,
    ),
    '',
    ...signedInGaps(rows).map(
      ({ connections, gap }) =>
        `- ${String(connections)} connections: the signed-in list's share of the limit is ${gap.toFixed(2)} × the public list's (target within ${String(SIGNED_IN_GAP_TARGET * 100)} %): ${mark(Math.abs(gap - 1) <= SIGNED_IN_GAP_TARGET)}`,
    ),
    `- errors and non-2xx answers: ${failed.length === 0 ? '0 ✅' : failed.map((s) => `${s.key} ${s.list} @${String(s.connections)}: ${String(s.errors + s.non2xx)}`).join('; ')}`,
  ];
  return lines;
}

/** The run's section: what was measured where, then the table and the targets. */
export function limitSection(r: LimitResult): string[] {
  return [
    '## Against the physical limit',
    '',
    `The service, the library reference and the limit on \`sp_bench_${String(r.posts)}\`, the lists only: the median of ${String(r.rounds)} rounds of ${String(r.duration)} s, the rounds' spread in brackets.`,
    '',
    `Measured ${r.measuredAt} on ${r.machine.cpus}, ${String(r.machine.memoryGb)} GB, servers on Node ${r.machine.node}, PostgreSQL ${r.machine.postgres}; load average ${r.machine.loadAverage.start.join(' / ')} when the rounds began, ${r.machine.loadAverage.end.join(' / ')} when they ended.`,
    '',
    ...(r.note ? [`> ${r.note}`, ''] : []),
    ...limitLines(r),
    '',
  ];
}
