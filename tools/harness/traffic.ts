import { pollUntil } from './poll';
import { account, call, sleep, type Answer } from './client';
import { isProblem } from './problem';
import type { ServiceProcess } from './service';

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

/** One run of a loop's body, told how many runs came before it. */
export type Body = (i: number) => Promise<unknown>;

/** Runs each body over and over until stopped (or `more` says no); what throws is kept in `failures`. */
export function untilStopped(
  bodies: Body[],
  more: () => boolean = () => true,
): { failures: string[]; done: Promise<void>; stop: () => Promise<void> } {
  let running = true;
  const failures: string[] = [];
  const loop = async (body: Body): Promise<void> => {
    for (let i = 0; running && more(); i++) {
      try {
        await body(i);
      } catch (error) {
        failures.push(error instanceof Error ? error.message : String(error));
        await sleep(100);
      }
    }
  };
  const done = Promise.all(bodies.map(loop)).then(() => undefined);
  const stop = async () => {
    running = false;
    await done;
  };
  return { failures, done, stop };
}

/**
 * Workers that create posts and read the signed-in list, one request after another each, and a
 * readiness poller, until stopped: the record a failover or lost-node case reads afterwards.
 */
function traffic(base: string, token: string, workers: number): Traffic {
  const answers: Recorded[] = [];
  const failures: Traffic['failures'] = [];
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
  // `record` keeps every failure itself, so no body ever throws into the loop's own record.
  const worker = (n: number) => (i: number) =>
    i % 2 === 0
      ? record('create', () =>
          call(base, '/posts/', {
            token,
            json: { title: `w${String(n)} #${String(i)}`, content: 'c' },
            timeoutMs: 30_000,
          }),
        )
      : record('list', () => call(base, '/posts/', { token, timeoutMs: 30_000 }));
  const poller = async () => {
    await record('ready', () => call(base, '/healthz/ready', { timeoutMs: 30_000 }));
    await sleep(100);
  };
  const { stop } = untilStopped([poller, ...Array.from({ length: workers }, (_, n) => worker(n))]);
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
    stop,
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

/** One replica behind the Service: its name in the record and where it listens. */
export interface Instance {
  name: string;
  base: string;
}

/** The calls of the steady mix. */
export type CallKind = 'public-list' | 'list' | 'get' | 'vote' | 'unvote' | 'create';

/** The statuses docs/api.md lists for each call (503 is every call's answer to a database that does not answer). */
export const API_STATUSES: Record<CallKind, readonly number[]> = {
  'public-list': [200, 304, 422, 503],
  list: [200, 304, 401, 422, 503],
  get: [200, 304, 401, 404, 422, 503],
  vote: [201, 401, 404, 409, 422, 503],
  unvote: [201, 401, 404, 409, 422, 503],
  create: [201, 401, 422, 503],
};

/** One request of the steady mix: which replica answered what, and how long the client waited. */
export interface MixedAnswer {
  kind: CallKind;
  instance: string;
  /** What the caller's `phase` said when it was sent. */
  phase: string;
  /** When it was sent (ms since the epoch). */
  at: number;
  /** 0 when no answer came (refused, reset, or the client's own time-out). */
  status: number;
  ms: number;
  /** A 5xx answer's detail, or why no answer came. */
  error?: string;
}

/** What a signed-in user's vote on a post is known to be after the traffic. */
export type VoteState = 'present' | 'absent' | 'unknown';

export interface SignedIn {
  id: number;
  token: string;
}

export interface SteadyTraffic {
  answers: MixedAnswer[];
  /** Posts whose create was answered 201, with their titles. */
  created: { id: number; title: string }[];
  /**
   * Per `user:post` pair the traffic voted on: present after an acknowledged vote (or a 409),
   * absent after an acknowledged withdrawal (or a 404), unknown when an answer never came or was a 5xx.
   */
  votes: Map<string, VoteState>;
  /** Requests sent and not yet answered. */
  pending(): number;
  stop(): Promise<void>;
}

export interface SteadyOptions {
  /** The replicas in rotation at this moment; requests go round-robin over them. */
  rotation: () => readonly Instance[];
  perSecond: number;
  users: readonly SignedIn[];
  /** Published posts the voters and readers pick from (the newest, as on a real site). */
  hotPosts: readonly number[];
  /** Every post id is at most this (GET one post also reads older, unpublished, missing ones). */
  maxPostId: number;
  /** The client's own time-out; latency beyond any budget is still measured up to it. */
  timeoutMs?: number;
  /** A label for what is going on, recorded with each request as it is sent. */
  phase?: () => string;
}

/** An error's message with its cause's, as fetch puts the reason (reset, refused, time-out) in the cause. */
const reason = (error: unknown): string => {
  // Duck-typed: under jest, fetch's errors come from another realm and fail instanceof Error.
  const e = error as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (typeof e.message !== 'string') return String(error);
  const cause = e.cause ? ` (${e.cause.code ?? e.cause.message ?? ''})` : '';
  return `${e.name ?? 'Error'}: ${e.message}${cause}`;
};

const pick = <T>(items: readonly T[]): T => {
  const item = items[Math.floor(Math.random() * items.length)];
  if (item === undefined) throw new Error('nothing to pick from');
  return item;
};

/** An answer's status and time, and for a 5xx what it said. */
function answerFigures(answer: Answer): Pick<MixedAnswer, 'status' | 'ms' | 'error'> {
  if (answer.status < 500) return { status: answer.status, ms: answer.ms };
  const body = answer.body as { detail?: unknown } | string;
  const detail = typeof body === 'string' ? body : JSON.stringify(body.detail ?? null);
  return { status: answer.status, ms: answer.ms, error: detail.slice(0, 200) };
}

/** What a vote's (dir 1) or withdrawal's (dir 0) answer says of the vote; `unknown` when no answer settles it. */
function voteState(answer: Answer | undefined, dir: 0 | 1, before: VoteState | undefined): VoteState {
  if (answer?.status === 201) return dir === 1 ? 'present' : 'absent';
  if (answer?.status === 409) return 'present';
  if (answer?.status === 404 && dir === 0) return 'absent';
  if (answer && answer.status < 500) return before ?? 'absent';
  return 'unknown';
}

/** What one run of the steady mix shares between its sends, its votes and its ticker. */
interface SteadyState {
  options: SteadyOptions;
  timeoutMs: number;
  answers: MixedAnswer[];
  created: SteadyTraffic['created'];
  votes: Map<string, VoteState>;
  /** `user:post` pairs with a vote or withdrawal in flight. */
  voting: Set<string>;
  /** Pairs whose vote is present, for withdrawals to pick from. */
  present: string[];
  inFlight: Set<Promise<void>>;
  /** Round-robin position over the rotation. */
  turn: number;
  sent: number;
}

/** Sends one request to the next replica in rotation and records its answer (or why none came). */
function send(
  state: SteadyState,
  kind: CallKind,
  run: (base: string) => Promise<Answer>,
  then?: (answer: Answer | undefined) => void,
): void {
  const live = state.options.rotation();
  if (live.length === 0) return;
  const instance = live[state.turn++ % live.length] as Instance;
  const phase = state.options.phase?.() ?? '';
  const at = Date.now();
  const started = performance.now();
  const record = { kind, instance: instance.name, phase, at };
  const request = run(instance.base).then(
    (answer) => {
      state.answers.push({ ...record, ...answerFigures(answer) });
      then?.(answer);
    },
    (error: unknown) => {
      state.answers.push({ ...record, status: 0, ms: performance.now() - started, error: reason(error) });
      then?.(undefined);
    },
  );
  state.inFlight.add(request);
  void request.finally(() => state.inFlight.delete(request));
}

/** Casts a vote, or withdraws one the traffic cast, and keeps what its answer says of the pair. */
function vote(state: SteadyState): void {
  const { options, votes, voting, present, timeoutMs } = state;
  const user = pick(options.users);
  // A third of the votes withdraw one the traffic cast, so withdrawals race the migration too.
  let key: string | undefined;
  if (Math.random() < 0.35 && present.length > 0) {
    const at = Math.floor(Math.random() * present.length);
    key = present[at];
    present.splice(at, 1);
  } else key = `${String(user.id)}:${String(pick(options.hotPosts))}`;
  if (key === undefined || voting.has(key)) return;
  const [userId, postId] = key.split(':').map(Number) as [number, number];
  const token = options.users.find((u) => u.id === userId)?.token ?? user.token;
  const dir = votes.get(key) === 'present' ? 0 : 1;
  voting.add(key);
  send(
    state,
    dir === 1 ? 'vote' : 'unvote',
    (base) => call(base, '/votes/', { token, json: { post_id: postId, dir }, timeoutMs }),
    (answer) => {
      voting.delete(key);
      const known = voteState(answer, dir, votes.get(key));
      votes.set(key, known);
      if (known === 'present') present.push(key);
    },
  );
}

/** Sends one request of the mix, its kind drawn by the mix's shares. */
function one(state: SteadyState): void {
  const { options, timeoutMs } = state;
  const r = Math.random();
  const user = pick(options.users);
  if (r < 0.3)
    send(state, 'public-list', (base) =>
      call(base, `/posts/public?skip=${String(pick([0, 0, 0, 10, 20]))}`, { timeoutMs }),
    );
  else if (r < 0.55) send(state, 'list', (base) => call(base, '/posts/', { token: user.token, timeoutMs }));
  else if (r < 0.75) {
    const id =
      Math.random() < 0.7 ? pick(options.hotPosts) : 1 + Math.floor(Math.random() * options.maxPostId);
    send(state, 'get', (base) => call(base, `/posts/${String(id)}`, { token: user.token, timeoutMs }));
  } else if (r < 0.95) vote(state);
  else {
    const title = `upgrade ${String(user.id)} #${String(state.sent)}`;
    send(
      state,
      'create',
      (base) =>
        call(base, '/posts/', { token: user.token, json: { title, content: 'steady traffic' }, timeoutMs }),
      (answer) => {
        if (answer?.status === 201) state.created.push({ id: (answer.body as { id: number }).id, title });
      },
    );
  }
}

/**
 * Open-loop mixed traffic at a fixed rate, as many independent clients make it: a request is sent
 * on schedule whether or not earlier ones have been answered, so a slow replica gathers a queue
 * instead of slowing the load. The mix: public list 30 %, signed-in list 25 %, one post 20 %,
 * votes 20 % (casts and withdrawals), new posts 5 %. A user never has two requests on the same
 * vote in flight, so each pair's outcome is known from its acknowledged answers.
 */
export function steadyTraffic(options: SteadyOptions): SteadyTraffic {
  const state: SteadyState = {
    options,
    timeoutMs: options.timeoutMs ?? 30_000,
    answers: [],
    created: [],
    votes: new Map<string, VoteState>(),
    voting: new Set<string>(),
    present: [],
    inFlight: new Set<Promise<void>>(),
    turn: 0,
    sent: 0,
  };

  const began = performance.now();
  // Catches up by elapsed time, so a late timer (a busy event loop) does not lower the rate.
  const ticker = setInterval(() => {
    const due = Math.floor(((performance.now() - began) / 1000) * options.perSecond);
    while (state.sent < due) {
      state.sent += 1;
      one(state);
    }
  }, 5);

  return {
    answers: state.answers,
    created: state.created,
    votes: state.votes,
    pending: () => state.inFlight.size,
    stop: async () => {
      clearInterval(ticker);
      while (state.inFlight.size > 0) await Promise.allSettled([...state.inFlight]);
    },
  };
}
