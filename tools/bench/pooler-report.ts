/** The figures of `npm run bench:pooler` (tools/bench/pooler.ts), and the Markdown tables it prints of them. */
import { fmt, section, table, type Row } from './common';
import { medianText, ratioText, roundRatio, rowsOf, type Series } from './rounds';

export interface PoolerResult {
  measuredAt: string;
  posts: number;
  duration: number;
  rounds: number;
  pool: number;
  /** machine()'s cells. */
  machine: Row;
  pgbouncer: string;
  /** Cores of CPU time PgBouncer had to itself and the rest had (`--pooler-cpu`), when split. */
  cpuSplit?: { pooler: number; rest: number };
  /** Each contender's series (reference, direct, pgbouncer, pgbouncer-unnamed, pgbouncer-wide, before), with PgBouncer's CPU per request (extra[POOLER_CPU]) in each round where it is in the path. */
  series: Series[];
}

/** The series' extra figure of PgBouncer's CPU per request, and its columns' name. */
export const POOLER_CPU = 'pooler CPU µs/req';

/** The run's section: its own heading when the pooler had CPU of its own (`--pooler-cpu`). */
export function poolerSection(r: PoolerResult): string[] {
  const keys = [...new Set(r.series.map((s) => s.key))];
  const poolerKeys = keys.filter((k) => r.series.some((s) => s.key === k && s.extra[POOLER_CPU]));
  const ratio = (at: (key: string) => Series | undefined, a: string, b: string) =>
    ratioText(roundRatio(at(a)?.rps ?? [], at(b)?.rps ?? []));
  const throughput = rowsOf(r.series, (at, { list, connections }) => ({
    list,
    connections,
    ...Object.fromEntries(
      keys.map((k) => {
        const s = at(k);
        const failed = s ? s.errors + s.non2xx : 0;
        const cell = s ? `${medianText(s.rps)} (${fmt(Math.min(...s.rps))}–${fmt(Math.max(...s.rps))})` : '–';
        return [k, `${cell}${failed > 0 ? ` ⚠ ${String(failed)} failed` : ''}`];
      }),
    ),
    ...(keys.includes('reference')
      ? { 'direct ÷ reference (target ≥ 0.75)': ratio(at, 'direct', 'reference') }
      : {}),
    'pgbouncer ÷ direct (target ≥ 0.9)': ratio(at, 'pgbouncer', 'direct'),
    ...(keys.includes('before') ? { 'direct ÷ before': ratio(at, 'direct', 'before') } : {}),
  }));
  const cpu = rowsOf(r.series, (at, { list, connections }) => ({
    list,
    connections,
    ...Object.fromEntries(keys.map((k) => [`${k} service CPU µs/req`, medianText(at(k)?.cpuUs)])),
    ...Object.fromEntries(
      poolerKeys.map((k) => [`${k} ${POOLER_CPU}`, medianText(at(k)?.extra[POOLER_CPU])]),
    ),
  }));
  const split = r.cpuSplit;
  return section(
    split ? '### With the pooler on CPU of its own' : '## Behind PgBouncer',
    table([
      {
        Posts: r.posts,
        'Rounds of the median, range and ratios': r.rounds,
        's a round': r.duration,
        Measured: r.measuredAt,
        ...r.machine,
        Pooler: `${r.pgbouncer}, transaction mode, server pool ${String(r.pool)} (the service's \`DB_POOL_MAX\` too)`,
        'CPU (Linux quotas)': split
          ? `PgBouncer ${fmt(split.pooler, 1)} core, everything else ${fmt(split.rest, 1)}`
          : 'shared',
      },
    ]),
    table(
      r.series
        .filter((s, i, all) => all.findIndex((x) => x.key === s.key) === i)
        .map((s) => ({ Contender: s.key, What: s.name })),
    ),
    table(throughput),
    table(cpu),
  );
}
