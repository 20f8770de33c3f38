import { pollUntil } from '../testing/poll';
import { account, call, isProblem, sleep, type Answer, type ServiceProcess } from './support';

/** One answer of the traffic, with when it came back (ms since the epoch). */
export interface Recorded {
  kind: 'create' | 'list' | 'ready';
  at: number;
  status: number;
  ms: number;
  problem: boolean;
  /** The post's id, for an acknowledged create. */
  id?: number;
}

export interface Traffic {
  answers: Recorded[];
  /** Transport failures (a hang past the call's own time-out included), with their time. */
  failures: { at: number; message: string }[];
  /** Waits, at most `withinMs`, for a create acknowledged after the moment `after`. */
  writeAcknowledgedAfter(after: number, withinMs: number): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Workers that create posts and read the signed-in list, one request after another each, and a
 * readiness poller, until stopped: the record a failover or lost-node case reads afterwards.
 */
export function traffic(base: string, token: string, workers: number): Traffic {
  const answers: Recorded[] = [];
  const failures: Traffic['failures'] = [];
  let running = true;
  const record = async (kind: Recorded['kind'], request: () => Promise<Answer>) => {
    try {
      const answer = await request();
      const id = kind === 'create' && answer.status === 201 ? (answer.body as { id: number }).id : undefined;
      answers.push({
        kind,
        at: Date.now(),
        status: answer.status,
        ms: answer.ms,
        problem: isProblem(answer),
        ...(id === undefined ? {} : { id }),
      });
    } catch (error) {
      failures.push({ at: Date.now(), message: error instanceof Error ? error.message : String(error) });
    }
  };
  const worker = async (n: number) => {
    for (let i = 0; running; i++) {
      if (i % 2 === 0)
        await record('create', () =>
          call(base, '/posts/', {
            token,
            json: { title: `w${String(n)} #${String(i)}`, content: 'c' },
            timeoutMs: 30_000,
          }),
        );
      else await record('list', () => call(base, '/posts/', { token, timeoutMs: 30_000 }));
    }
  };
  const poller = async () => {
    while (running) {
      await record('ready', () => call(base, '/healthz/ready', { timeoutMs: 30_000 }));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const all = Promise.all([poller(), ...Array.from({ length: workers }, (_, n) => worker(n))]);
  return {
    answers,
    failures,
    writeAcknowledgedAfter: async (after, withinMs) => {
      await pollUntil(
        () => answers.some((a) => a.kind === 'create' && a.status === 201 && a.at > after),
        (seen) => seen,
        { withinMs },
      );
    },
    stop: async () => {
      running = false;
      await all;
    },
  };
}

/**
 * Starts the service, signs `email` up and runs `workers` of traffic for 1.5 s, so the pool is
 * busy and the record has a steady start before the case breaks anything.
 */
export async function startUnderTraffic(
  start: () => Promise<ServiceProcess>,
  email: string,
  workers: number,
): Promise<{ svc: ServiceProcess; load: Traffic }> {
  const svc = await start();
  const load = traffic(svc.base, await account(svc.base, email), workers);
  await sleep(1500);
  return { svc, load };
}
