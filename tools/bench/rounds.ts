/**
 * Alternating rounds between servers on the same lists (tools/bench/pooler.ts, tools/bench/limit.ts,
 * tools/bench/tracing.ts): the answers compared first, then each round measures every contender one
 * after the other, in an order that turns each round, so a disturbance of the machine lands on all
 * of them; a ratio between two contenders is taken within each round.
 */
import { fmt, log } from './common';
import { measure, median, progress, type EndpointFigures, type Server } from './measure';
import { login } from '../harness/client';
import { BENCH_PASSWORD } from '../harness/seed';

/** A list the bench measures: its name in the tables, its path, and whether it needs a token. */
export interface MeasuredList {
  list: string;
  path: string;
  signedIn: boolean;
}

export interface Contender {
  key: string;
  name: string;
  server: Server;
  token: string;
}

/** A bench user's token from a server's own /login. */
export const benchToken = (base: string): Promise<string> =>
  login(base, 'user1@bench.example', BENCH_PASSWORD);

/**
 * Every contender answers each measured list with the same status, body and Link header as the
 * first one: a ratio between servers that answer differently would compare different work.
 */
export async function sameAnswers(contenders: Contender[], lists: MeasuredList[]): Promise<void> {
  for (const { list, path: listPath, signedIn } of lists) {
    let first: { key: string; answer: string } | undefined;
    for (const c of contenders) {
      const res = await fetch(`${c.server.base}${listPath}`, {
        headers: signedIn ? { authorization: `Bearer ${c.token}` } : {},
      });
      const answer = `${String(res.status)} ${res.headers.get('link') ?? '-'}\n${await res.text()}`;
      first ??= { key: c.key, answer };
      if (res.status !== 200 || answer !== first.answer)
        throw new Error(
          `${list}: ${c.key} answers differently from ${first.key}:\n${answer.slice(0, 300)}\n${first.answer.slice(0, 300)}`,
        );
    }
  }
}

/** One contender's run on one list at one count in one round. */
export interface RoundRun {
  round: number;
  connections: number;
  list: MeasuredList;
  contender: Contender;
  figures: EndpointFigures;
}

/** One contender on one list at one count, over the rounds (index i: round i). */
export interface Series {
  key: string;
  name: string;
  list: string;
  signedIn: boolean;
  connections: number;
  rps: number[];
  p50: number[];
  /** The server process's CPU time per request in each round (µs; NaN where /proc tells none). */
  cpuUs: number[];
  /** Figures the bench's afterRun hook measured beside the run (pooler.ts: PgBouncer's CPU), by name, one per round that had one. */
  extra: Record<string, number[]>;
  errors: number;
  non2xx: number;
}

/** A run's figures added to the series of its contender, list and count, started on its first round. */
function addRun(series: Series[], { contender: c, list, connections, figures: f }: RoundRun): Series {
  let s = series.find((x) => x.key === c.key && x.list === list.list && x.connections === connections);
  if (!s) {
    s = {
      key: c.key,
      name: c.name,
      list: list.list,
      signedIn: list.signedIn,
      connections,
      rps: [],
      p50: [],
      cpuUs: [],
      extra: {},
      errors: 0,
      non2xx: 0,
    };
    series.push(s);
  }
  s.rps.push(f.rps);
  s.p50.push(f.p50);
  s.cpuUs.push(f.cpuUsPerRequest ?? Number.NaN);
  s.errors += f.errors;
  s.non2xx += f.non2xx;
  return s;
}

/** The contenders in round `round`'s order: each round starts with the next one, so none always goes first. */
export const turned = <T>(contenders: T[], round: number): T[] =>
  contenders.map((_, i) => contenders[(i + round) % contenders.length] as T);

/** Every contender on every list at every count, round after round, so that a ratio can be taken within a round; the hooks measure more around each run. */
export async function alternatingRounds(
  contenders: Contender[],
  lists: MeasuredList[],
  run: { rounds: number; connectionCounts: number[]; duration: number; warmup: number },
  hooks: { beforeRun?: (c: Contender) => void; afterRun?: (r: RoundRun) => Record<string, number> } = {},
): Promise<Series[]> {
  const series: Series[] = [];
  for (let round = 0; round < run.rounds; round++)
    for (const connections of run.connectionCounts)
      for (const list of lists) {
        for (const contender of turned(contenders, round)) {
          const figures = await measure(
            contender.server,
            {
              url: `${contender.server.base}${list.path}`,
              ...(list.signedIn ? { headers: { authorization: `Bearer ${contender.token}` } } : {}),
            },
            { duration: run.duration, connections, warmup: run.warmup },
            () => {
              hooks.beforeRun?.(contender);
              return Promise.resolve();
            },
          );
          const r = { round, connections, list, contender, figures };
          const s = addRun(series, r);
          const extra = Object.entries(hooks.afterRun?.(r) ?? {});
          for (const [name, x] of extra) (s.extra[name] ??= []).push(x);
          const at = `round ${String(round + 1)}  c=${String(connections).padEnd(3)} ${list.list.padEnd(26)} ${contender.key.padEnd(18)}`;
          log(`${progress(at, figures)}${extra.map(([name, x]) => `  ${name} ${String(x)}`).join('')}`);
        }
      }
  return series;
}

/** The series as table rows, one per list and count in the order measured; `row` gets each contender's series there by key. */
export function rowsOf<T>(
  series: Series[],
  row: (at: (key: string) => Series | undefined, shape: { list: string; connections: number }) => T,
): T[] {
  const same = (a: Series, b: Series) => a.list === b.list && a.connections === b.connections;
  return series
    .filter((s, i) => series.findIndex((x) => same(x, s)) === i)
    .map((first) => row((key) => series.find((s) => s.key === key && same(s, first)), first));
}

/** A ratio taken within each round (the machine's speed drifts between rounds, little within one): its median and range. */
export interface Ratio {
  median: number;
  min: number;
  max: number;
}

/** a / b round by round, for the rounds both measured. */
export function roundRatio(a: number[], b: number[]): Ratio | undefined {
  const rs = a.flatMap((x, i) => {
    const y = b[i];
    return Number.isFinite(x) && y !== undefined && y > 0 ? [x / y] : [];
  });
  return rs.length === 0 ? undefined : { median: median(rs), min: Math.min(...rs), max: Math.max(...rs) };
}

/** A ratio's median and, when the rounds differ, their range. */
export const ratioText = (r: Ratio | undefined): string =>
  !r ? '–' : `${r.median.toFixed(2)}${r.min === r.max ? '' : ` (${r.min.toFixed(2)}–${r.max.toFixed(2)})`}`;

/** The median of the rounds that have a figure, whole, or '–'. */
export function medianText(xs: number[] | undefined): string {
  const known = (xs ?? []).filter(Number.isFinite);
  return known.length === 0 ? '–' : fmt(median(known));
}
