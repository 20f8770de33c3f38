/** The suites' and drills' HTTP client: one call with a hard time-out, and the accounts it signs in as. */
import { pollUntil } from './poll';

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export interface Answer {
  status: number;
  contentType: string;
  /** The Retry-After header, when the answer has one. */
  retryAfter: string | null;
  headers: Headers;
  body: unknown;
  ms: number;
}

/** One request with a hard time-out, so a hanging service fails the case instead of the runner. */
export async function call(
  base: string,
  pathAndQuery: string,
  init: {
    method?: string;
    token?: string;
    json?: unknown;
    form?: Record<string, string>;
    /** Sent as it is, with the headers that describe it (a compressed JSON body, say). */
    body?: string | Uint8Array;
    headers?: Record<string, string>;
    timeoutMs?: number;
  } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...init.headers };
  let body = init.body;
  if (init.token) headers.Authorization = `Bearer ${init.token}`;
  if (init.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(init.json);
  }
  if (init.form) {
    headers['Content-Type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(init.form).toString();
  }
  const started = performance.now();
  const res = await fetch(`${base}${pathAndQuery}`, {
    method: init.method ?? (body === undefined ? 'GET' : 'POST'),
    headers,
    body,
    signal: AbortSignal.timeout(init.timeoutMs ?? 30_000),
  });
  const text = await res.text();
  const contentType = res.headers.get('content-type') ?? '';
  let parsed: unknown = text;
  if (contentType.includes('json') && text !== '') parsed = JSON.parse(text);
  return {
    status: res.status,
    contentType,
    retryAfter: res.headers.get('retry-after'),
    headers: res.headers,
    body: parsed,
    ms: performance.now() - started,
  };
}

/** POST /votes/ as `token`'s user: `dir` 1 casts a vote on the post, 0 withdraws it. */
export const vote = (
  base: string,
  token: string,
  postId: number | undefined,
  dir: number,
  timeoutMs?: number,
): Promise<Answer> => call(base, '/votes/', { token, json: { post_id: postId, dir }, timeoutMs });

/** The middle of some timings (the upper one of an even count); NaN for none. */
export const p50 = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
};

/** How many of the items have each key. */
export function countBy<T>(items: readonly T[], key: (item: T) => string | number): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const item of items) {
    const k = key(item);
    counts[k] = (counts[k] ?? 0) + 1;
  }
  return counts;
}

/** "201x40,503x12": counts on one line. */
export const countsText = (counts: Record<string, number>): string =>
  Object.entries(counts)
    .map(([k, n]) => `${k}x${String(n)}`)
    .join(',');

/** "201x40,503x12": how many answers had each status. */
export const statusCounts = (answers: { status: number }[]): string =>
  countsText(countBy(answers, (a) => a.status));

/** The password `account` registers with unless told otherwise. */
export const ACCOUNT_PASSWORD = 'correct horse battery';

/** Logs in through the API; returns the token. */
export async function login(base: string, email: string, password = ACCOUNT_PASSWORD): Promise<string> {
  const answer = await call(base, '/login', { form: { username: email, password } });
  if (answer.status !== 200) throw new Error(`login ${email}: ${answer.status}`);
  return (answer.body as { access_token: string }).access_token;
}

/** Registers and logs in through the API; returns the token. */
export async function account(base: string, email: string, password = ACCOUNT_PASSWORD): Promise<string> {
  const created = await call(base, '/users/', { json: { email, password } });
  if (created.status !== 201) throw new Error(`register ${email}: ${created.status}`);
  return login(base, email, password);
}

/** Registers and logs in `email` through the API, then publishes `count` posts as it. */
export async function author(
  base: string,
  email: string,
  count: number,
): Promise<{ token: string; posts: number[] }> {
  const token = await account(base, email);
  const posts: number[] = [];
  for (let i = 0; i < count; i++) {
    const res = await call(base, '/posts/', { token, json: { title: `post ${i}`, content: 'content' } });
    if (res.status !== 201) throw new Error(`create post: ${res.status}`);
    posts.push((res.body as { id: number }).id);
  }
  return { token, posts };
}

/** Polls until the path answers with the status or the time runs out; returns the last answer (none: refused or timed out). */
export async function waitForStatus(
  base: string,
  p: string,
  status: number,
  withinMs: number,
): Promise<Answer | undefined> {
  const read = () => call(base, p, { timeoutMs: 2000 }).catch(() => undefined);
  return (await pollUntil(read, (got) => got?.status === status, { withinMs, everyMs: 50 })).value;
}
