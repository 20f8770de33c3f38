/** The figures of `npm run bench:limit` (tools/bench/limit.ts), and the Markdown tables it prints of them. */
import { loadAverageText, mark, section, table, type Row } from './common';
import { medianText, ratioText, roundRatio, rowsOf, type Ratio, type Series } from './rounds';

/** Every list's service / limit req/s, median of the rounds, at every count. */
const LIMIT_RATIO_TARGET = 0.75;
/** The signed-in list's ratio to the limit within this fraction of the public list's. */
const SIGNED_IN_GAP_TARGET = 0.1;

export interface LimitResult {
  measuredAt: string;
  posts: number;
  duration: number;
  rounds: number;
  note?: string;
  /** machine()'s cells. */
  machine: Row;
  /** The load average when the rounds began (the machine's is when they ended). */
  loadAverageAtStart: number[];
  /** The series of the service, the library reference and the limit (their keys). */
  series: Series[];
}

/** Each list at each count: the service against the limit and the reference, a table row. */
function limitRows(
  r: LimitResult,
): { list: string; signedIn: boolean; connections: number; ofLimit?: Ratio; row: Row }[] {
  return rowsOf(r.series, (at, { list, connections }) => {
    const [service, reference, limit] = [at('service'), at('reference'), at('limit')];
    const ofLimit = roundRatio(service?.rps ?? [], limit?.rps ?? []);
    const cpuOfLimit = roundRatio(service?.cpuUs ?? [], limit?.cpuUs ?? []);
    return {
      list,
      signedIn: service?.signedIn ?? false,
      connections,
      ...(ofLimit ? { ofLimit } : {}),
      row: {
        List: list,
        Connections: connections,
        'Service req/s': medianText(service?.rps),
        'Reference req/s': medianText(reference?.rps),
        'Limit req/s': medianText(limit?.rps),
        'Service / limit req/s': ratioText(ofLimit),
        'Service / reference req/s': ratioText(roundRatio(service?.rps ?? [], reference?.rps ?? [])),
        'CPU µs/req service / limit': `${medianText(service?.cpuUs)} / ${medianText(limit?.cpuUs)} (${cpuOfLimit ? cpuOfLimit.median.toFixed(2) : '–'} ×)`,
        [`Target ≥ ${String(LIMIT_RATIO_TARGET)} of the limit`]: ofLimit
          ? mark(ofLimit.median >= LIMIT_RATIO_TARGET)
          : '–',
      },
    };
  });
}

/** Each count's signed-in list against the public list (their shares of the limit), and the errors. */
function checkRows(r: LimitResult, rows: ReturnType<typeof limitRows>): Row[] {
  // The lists without a search: the public one and the signed-in one.
  const share = (connections: number, signedIn: boolean) =>
    rows.find(
      (row) => row.connections === connections && row.signedIn === signedIn && !row.list.includes('search'),
    )?.ofLimit?.median;
  const failed = r.series.filter((s) => s.errors + s.non2xx > 0);
  return [
    ...[...new Set(rows.map((row) => row.connections))].flatMap((connections) => {
      const pub = share(connections, false);
      const signedIn = share(connections, true);
      if (pub === undefined || signedIn === undefined) return [];
      const gap = signedIn / pub;
      return {
        Check: `${String(connections)} connections: the signed-in list's share of the limit over the public list's`,
        Measured: `${gap.toFixed(2)} ×`,
        Target: `within ${String(SIGNED_IN_GAP_TARGET * 100)} %`,
        Verdict: mark(Math.abs(gap - 1) <= SIGNED_IN_GAP_TARGET),
      };
    }),
    {
      Check: 'errors and non-2xx answers',
      Measured:
        failed.length === 0
          ? '0'
          : failed
              .map((s) => `${s.key} ${s.list} @${String(s.connections)}: ${String(s.errors + s.non2xx)}`)
              .join('; '),
      Target: '0',
      Verdict: mark(failed.length === 0),
    },
  ];
}

/** The run's section: what was measured where, the table and the checks. */
export function limitSection(r: LimitResult): string[] {
  const rows = limitRows(r);
  return section(
    '## Against the physical limit',
    table([
      {
        Database: `\`sp_bench_${String(r.posts)}\``,
        Rounds: r.rounds,
        's a round': r.duration,
        Measured: r.measuredAt,
        ...r.machine,
        'Load average at the start': loadAverageText(r.loadAverageAtStart),
      },
    ]),
    r.note ? [`> ${r.note}`] : [],
    table(rows.map((row) => row.row)),
    table(checkRows(r, rows)),
  );
}
