/** The figures of `npm run bench:pooler` (tools/bench/pooler.ts), and the Markdown tables it prints of them. */
import { median } from './measure';

/** One contender on one list at one connection count, over the rounds. */
export interface PoolerSeries {
  /** reference | direct | pgbouncer | pgbouncer-unnamed | before */
  key: string;
  name: string;
  list: string;
  connections: number;
  rps: number[];
  median?: number;
  /** The service process's CPU time per request in each round (µs). */
  serviceCpuUs: number[];
  /** PgBouncer's CPU time per request in each round (µs); empty when direct. */
  poolerCpuUs: number[];
  errors: number;
  non2xx: number;
}

export interface PoolerResult {
  measuredAt: string;
  posts: number;
  duration: number;
  rounds: number;
  pool: number;
  machine: {
    cpus: string;
    memoryGb: number;
    node: string;
    postgres: string;
    pgbouncer: string;
    /** Cores of CPU time PgBouncer had to itself and the rest had (`--pooler-cpu`), when split. */
    cpuSplit?: { pooler: number; rest: number };
  };
  series: PoolerSeries[];
}

const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** The figures as Markdown: a table of medians with the rounds' spread, and the ratios. */
function poolerLines(r: PoolerResult): string[] {
  const find = (key: string, list: string, connections: number) =>
    r.series.find((s) => s.key === key && s.list === list && s.connections === connections);
  const keys = [...new Set(r.series.map((s) => s.key))];
  const poolerKeys = keys.filter((k) => r.series.some((s) => s.key === k && s.poolerCpuUs.length > 0));
  const names = new Map(r.series.map((s) => [s.key, s.name]));
  const hasReference = keys.includes('reference');
  const shapes = [...new Set(r.series.map((s) => `${s.list}|${String(s.connections)}`))];
  const cell = (s: PoolerSeries | undefined) =>
    s
      ? `${fmt(s.median ?? 0)} (${fmt(Math.min(...s.rps))}–${fmt(Math.max(...s.rps))})${s.errors + s.non2xx > 0 ? ` ⚠ ${String(s.errors + s.non2xx)} failed` : ''}`
      : '—';
  // Each round measures a cell's contenders back to back, so a round's own ratio is little moved by
  // the machine's speed drifting between rounds, which the ratio of two medians from different
  // rounds is not.
  const ratio = (a: string, b: string, list: string, connections: number) => {
    const x = find(a, list, connections)?.rps ?? [];
    const y = find(b, list, connections)?.rps ?? [];
    const perRound = x.flatMap((v, i) => {
      const base = y[i];
      return base ? [v / base] : [];
    });
    if (perRound.length === 0) return '—';
    const spread =
      perRound.length > 1 ? ` (${fmt(Math.min(...perRound), 2)}–${fmt(Math.max(...perRound), 2)})` : '';
    return `${fmt(median(perRound), 2)}${spread}`;
  };
  const split = r.machine.cpuSplit;
  const lines = [
    `${fmt(r.posts)} posts, list of 10, ${String(r.rounds)} rounds of ${String(r.duration)} s per cell (median, and the rounds' range, in req/s; a ratio is the median of the rounds' own ratios, and their range). Measured ${r.measuredAt} on ${r.machine.cpus}, ${String(r.machine.memoryGb)} GB; service on Node ${r.machine.node}, PostgreSQL ${r.machine.postgres}, ${r.machine.pgbouncer} in transaction mode with a server pool of ${String(r.pool)} (the service's \`DB_POOL_MAX\` too), ${split ? `PgBouncer limited to ${fmt(split.pooler, 1)} core of CPU time and everything else (the servers, PostgreSQL, the load generator) to the other ${fmt(split.rest, 1)} (Linux CPU quotas, \`--pooler-cpu ${fmt(split.pooler, 1)}\`): the pooler on CPU of its own, as in a cluster, and every contender on the same smaller share.` : 'everything on the one machine.'}`,
    '',
    ...keys.map((k) => `- **${k}**: ${names.get(k) ?? k}`),
    '',
    `| list | connections | ${keys.join(' | ')} |${hasReference ? ' direct ÷ reference (target ≥ 0.75) |' : ''} pgbouncer ÷ direct (target ≥ 0.9) |${keys.includes('before') ? ' direct ÷ before |' : ''}`,
    `|---|---|${keys.map(() => '---|').join('')}${hasReference ? '---|' : ''}---|${keys.includes('before') ? '---|' : ''}`,
    ...shapes.map((shape) => {
      const [list = '', c = '0'] = shape.split('|');
      const connections = Number(c);
      return `| ${list} | ${c} | ${keys.map((k) => cell(find(k, list, connections))).join(' | ')} |${hasReference ? ` ${ratio('direct', 'reference', list, connections)} |` : ''} ${ratio('pgbouncer', 'direct', list, connections)} |${keys.includes('before') ? ` ${ratio('direct', 'before', list, connections)} |` : ''}`;
    }),
    '',
    'CPU time per request (µs, median of the rounds): the service process, and PgBouncer where it is in the path.',
    '',
    `| list | connections | ${keys.map((k) => `${k} service`).join(' | ')} | ${poolerKeys.map((k) => `${k} pooler`).join(' | ')} |`,
    `|---|---|${keys.map(() => '---|').join('')}${poolerKeys.map(() => '---|').join('')}`,
    ...shapes.map((shape) => {
      const [list = '', c = '0'] = shape.split('|');
      const connections = Number(c);
      const cpu = (xs: number[] | undefined) => (xs && xs.length > 0 ? fmt(median(xs)) : '—');
      return `| ${list} | ${c} | ${keys.map((k) => cpu(find(k, list, connections)?.serviceCpuUs)).join(' | ')} | ${poolerKeys.map((k) => cpu(find(k, list, connections)?.poolerCpuUs)).join(' | ')} |`;
    }),
  ];
  return lines;
}

/** The run's section: its own heading when the pooler had CPU of its own (`--pooler-cpu`). */
export function poolerSection(r: PoolerResult): string[] {
  const heading = r.machine.cpuSplit ? '### With the pooler on CPU of its own' : '## Behind PgBouncer';
  return [heading, '', ...poolerLines(r), ''];
}
