/**
 * HTTP to the ingress the suite is pointed at: the base address (K8S_BASE_URL) and the Host header
 * (K8S_HOST). node:http, not fetch, because the suite must send paths exactly as written
 * (`//login`, `/%6Cogin`) and its own Host header.
 */
import { randomBytes } from 'node:crypto';
import { Agent, request, type IncomingHttpHeaders } from 'node:http';
import { parsedBody, problemFaults } from '../../tools/harness/problem';

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** Set when no HTTP answer arrived (connection refused or reset, time-out). */
  error?: string;
}

export interface SendOptions {
  headers?: Record<string, string>;
  body?: string;
  /** A new TCP connection for this request (no keep-alive reuse). */
  fresh?: boolean;
  /** Another Host header than the configured one. */
  host?: string;
  /** Called once the whole request has been handed to the operating system. */
  onWritten?: () => void;
  /** The client's own address (127.0.0.0/8 locally): the proxy's limits count per address. */
  localAddress?: string;
}

/**
 * A suite's requests from its own client address (the proxy's limits count per address), each on a
 * new connection, signed in with `token` when given.
 */
export const fromAddress =
  (address: string) =>
  (token?: string, extra: SendOptions = {}): SendOptions => ({
    ...extra,
    localAddress: address,
    fresh: true,
    headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...extra.headers },
  });

/** In this run's addresses and titles: a kind cluster keeps its database between runs. */
export const run = `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;

function required(name: string): string {
  const value = process.env[name];
  if (!value)
    throw new Error(`${name} is not set: run the suite through npm run k8s:local or npm run k8s:kind`);
  return value;
}

export const baseUrl = new URL(required('K8S_BASE_URL'));
export const host = required('K8S_HOST');

const agent = new Agent({ keepAlive: true, maxSockets: 16 });

/** Every answer the suite received, by status ("error" for none): the proof table's totals. */
export const tally = { sent: 0, statuses: {} as Record<string, number> };

export function send(method: string, path: string, options: SendOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = { Host: options.host ?? host, ...options.headers };
  if (options.body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(options.body));
  tally.sent++;
  return new Promise((resolvePromise) => {
    const finish = (answer: Answer) => {
      const key = answer.error ? 'error' : String(answer.status);
      tally.statuses[key] = (tally.statuses[key] ?? 0) + 1;
      resolvePromise(answer);
    };
    const req = request(
      {
        host: baseUrl.hostname,
        port: baseUrl.port || 80,
        method,
        path,
        headers,
        agent: options.fresh ? false : agent,
        ...(options.localAddress ? { localAddress: options.localAddress } : {}),
        timeout: 15_000,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => {
          finish({ status: res.statusCode ?? 0, headers: res.headers, body });
        });
        res.on('error', (error) => {
          finish({ status: 0, headers: res.headers, body, error: error.message });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('no answer within 15 s')));
    if (options.onWritten) req.once('finish', options.onWritten);
    req.on('error', (error) => {
      finish({ status: 0, headers: {}, body: '', error: error.message });
    });
    req.end(options.body);
  });
}

export function postForm(
  path: string,
  fields: Record<string, string>,
  options: SendOptions = {},
): Promise<Answer> {
  return send('POST', path, {
    ...options,
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', ...options.headers },
    body: new URLSearchParams(fields).toString(),
  });
}

export function postJson(path: string, value: unknown, options: SendOptions = {}): Promise<Answer> {
  return send('POST', path, {
    ...options,
    headers: { 'Content-Type': 'application/json', ...options.headers },
    body: JSON.stringify(value),
  });
}

/** Registers `email` and signs it in through the proxy (201, then 200, both checked); its token. */
export async function signedIn(email: string, options: SendOptions = {}): Promise<string> {
  const password = 'correct horse battery';
  const registered = await postJson('/users/', { email, password }, options);
  expect({ email, registered: registered.status }).toEqual({ email, registered: 201 });
  const login = await postForm('/login', { username: email, password }, options);
  expect({ email, login: login.status }).toEqual({ email, login: 200 });
  return (JSON.parse(login.body) as { access_token: string }).access_token;
}

/** What keeps the answer from being the service's problem+json (tools/harness/problem.ts); empty when it is one. */
export function problemFaultsOf(answer: Answer): string[] {
  return problemFaults({
    status: answer.status,
    contentType: answer.headers['content-type'],
    body: parsedBody(answer.body),
  });
}

export const isProblem = (answer: Answer): boolean => problemFaultsOf(answer).length === 0;

/**
 * Whether the service produced the answer. Every response of the Express app carries X-Request-Id;
 * the controller's own pages (429, 503 without endpoints, 404 for unknown hosts) do not.
 */
export function answeredByService(answer: Answer): boolean {
  return answer.headers['x-request-id'] !== undefined;
}

/** The answer in one line for a failure message: status and start of body, or why none came. */
export function describeAnswer(answer: Answer): string {
  return answer.error ? `no answer (${answer.error})` : `${answer.status} ${answer.body.slice(0, 120)}`;
}

/** A page of the controller itself (rate limit, no endpoints), not an answer of the service. */
export function isProxyPage(answer: Answer): boolean {
  return (answer.headers['content-type'] ?? '').startsWith('text/html');
}

export function closeConnections(): void {
  agent.destroy();
}
