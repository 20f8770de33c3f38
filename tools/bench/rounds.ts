/**
 * Alternating rounds between servers on the same lists (tools/bench/pooler.ts, tools/bench/limit.ts): the
 * answers compared first, then each round measures every contender one after the other, in an
 * order that turns each round, so a disturbance of the machine lands on all of them.
 */
import { measure, type EndpointFigures, type Server } from './measure';
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
export async function benchToken(base: string): Promise<string> {
  const res = await fetch(`${base}/login`, {
    method: 'POST',
    body: new URLSearchParams({ username: 'user1@bench.example', password: BENCH_PASSWORD }),
  });
  const body = (await res.json()) as { access_token?: string };
  if (!body.access_token) throw new Error(`login at ${base}: ${String(res.status)}`);
  return body.access_token;
}

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

/**
 * `rounds` rounds; in each, every count, every list, every contender (a warm-up of `warmup` s, then
 * `duration` s). `beforeRun` runs just before each measured run, `measured` after it.
 */
export async function alternatingRounds(
  contenders: Contender[],
  lists: MeasuredList[],
  run: { rounds: number; connectionCounts: number[]; duration: number; warmup: number },
  measured: (r: RoundRun) => void,
  beforeRun?: (c: Contender) => void,
): Promise<void> {
  for (let round = 0; round < run.rounds; round++)
    for (const connections of run.connectionCounts)
      for (const list of lists) {
        // Each round starts with the next contender, so none always goes first.
        const order = contenders.map((_, i) => contenders[(i + round) % contenders.length] as Contender);
        for (const contender of order) {
          const figures = await measure(
            contender.server,
            {
              url: `${contender.server.base}${list.path}`,
              ...(list.signedIn ? { headers: { authorization: `Bearer ${contender.token}` } } : {}),
            },
            { duration: run.duration, connections, warmup: run.warmup },
            () => {
              beforeRun?.(contender);
              return Promise.resolve();
            },
          );
          measured({ round, connections, list, contender, figures });
        }
      }
}

/** The option parser every bench script shares: `--name value`, or the fallback. */
export function option(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? (process.argv[i + 1] ?? fallback) : fallback;
}
