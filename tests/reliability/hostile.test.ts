import http from 'node:http';
import fc from 'fast-check';
import { parsedBody, problemFaults } from '../../tools/harness/problem';
import { countsText, statusCounts } from '../../tools/harness/client';
import { rawExchange } from '../../tools/harness/hostile';
import { call, author, report, startService, type ServiceProcess, scratchDatabase, vote } from './support';
import { hostileRequests, operationsOf, type HostileRequest } from './hostile-inputs';
import { normaliseEmail } from '../../service/src/users/email';

const SEED = 20261121;
/** The attack families; each must be generated (see the report line). */
const FAMILIES = [
  'encoding',
  'charset',
  'length',
  'expect',
  'claims',
  'email',
  'health',
  'protocol',
  // JOSE header parameters a token may carry (crit, b64) and If-Match preconditions.
  'crit',
  'b64',
  'if-match',
];
const RUNS = 5000;

const database = scratchDatabase('hostile');
let svc: ServiceProcess;

beforeAll(async () => {
  svc = await startService({ DB_NAME: database.name });
});

type Answer = { status: number; headers: http.IncomingHttpHeaders; body: string };

/** One response read off raw bytes: status, headers, body (Content-Length, chunked or to the close). */
function parseRaw(text: string): (Answer & { complete: boolean }) | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
  const headers: http.IncomingHttpHeaders = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = text.slice(end + 4);
  let complete = false;
  const length = headers['content-length'];
  if (length !== undefined) {
    // The text is latin1, one character a byte. Bytes past the length are a further answer on the
    // same connection (a pipelined remainder refused with its own 400), not part of this body.
    complete = body.length >= Number(length);
    body = body.slice(0, Number(length));
  } else if (headers['transfer-encoding'] === 'chunked') {
    complete = body.endsWith('0\r\n\r\n');
    let decoded = '';
    for (let rest = body; ;) {
      const lineEnd = rest.indexOf('\r\n');
      const size = parseInt(rest.slice(0, lineEnd), 16);
      if (lineEnd < 0 || !(size > 0)) break;
      decoded += rest.slice(lineEnd + 2, lineEnd + 2 + size);
      rest = rest.slice(lineEnd + 2 + size + 2);
    }
    body = decoded;
  }
  return { status, headers, body, complete };
}

/** Raw bytes on a socket of their own; the answer once complete or once the server closes. */
async function sendRaw(port: number, bytes: string): Promise<Answer> {
  const { text } = await rawExchange(port, bytes, {
    waitMs: 10_000,
    encoding: 'latin1',
    complete: (received) => parseRaw(received)?.complete === true,
    ignoreErrors: true,
  });
  const answer = parseRaw(text);
  if (answer && answer.status > 0) return answer;
  throw new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`);
}

function request(port: number, r: HostileRequest, agent: http.Agent): Promise<Answer> {
  if (r.raw !== undefined) return sendRaw(port, r.raw);
  return new Promise((resolve, reject) => {
    // A declared length never sent goes on a socket of its own, closed after the answer.
    const headers = r.fresh ? { ...r.headers, Connection: 'close' } : r.headers;
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: r.method,
        path: r.path,
        headers,
        agent: r.fresh ? false : agent,
        // A refusal from the declared length alone comes at once; waiting for a body never sent is the bug.
        timeout: r.fresh ? 5_000 : 20_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks).toString(),
          });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(r.body);
  });
}

/** A digest of every row: a refused request must leave it as it was. */
const digest = async (): Promise<string> =>
  JSON.stringify(
    (
      await database.db.raw<{ rows: unknown[] }>(
        `SELECT (SELECT count(*) || ':' || coalesce(sum(hashtext(u::text)), 0) FROM users u) AS users,
                (SELECT count(*) || ':' || coalesce(sum(hashtext(p::text)), 0) FROM posts p) AS posts,
                (SELECT count(*) || ':' || coalesce(sum(hashtext(v::text)), 0) FROM votes v) AS votes`,
      )
    ).rows[0],
  );

/** What is wrong with an answer to `r`; `unchanged`: whether the database is as it was before it. */
function answerProblems(r: HostileRequest, res: Answer, unchanged: boolean): string[] {
  const problems: string[] = [];
  if (res.status >= 500) problems.push(`status ${String(res.status)}`);
  if (r.mustRefuse && res.status < 400) problems.push(`accepted although ${r.mustRefuse}`);
  if (r.expectStatus && !r.expectStatus.includes(res.status))
    problems.push(`status ${String(res.status)}, expected ${r.expectStatus.join(' or ')}`);
  if (res.headers['set-cookie']) problems.push('Set-Cookie');
  if (/\n\s+at |node_modules|knex|syntax error at/i.test(res.body)) problems.push('internals leaked');
  if (res.status >= 400) {
    // The one problem+json check of every suite (content type, type, status, title, detail).
    problems.push(
      ...problemFaults({
        status: res.status,
        contentType: res.headers['content-type'],
        body: parsedBody(res.body),
      }),
    );
    if (!unchanged) problems.push('a refused request changed the database');
  }
  return problems;
}

/** Every stored address, those not in the e-mail policy's normalised form, and how many share a mailbox. */
async function storedAddresses() {
  const emails = await database.db<{ email: string }>('users').pluck('email');
  const notNormalised = emails.filter((email) => {
    const result = normaliseEmail(email);
    return !result.ok || result.email !== email;
  });
  return {
    emails,
    notNormalised,
    sameMailbox: emails.length - new Set(emails.map((e) => e.toLowerCase())).size,
  };
}

test('When 5,000 generated hostile requests reach every endpoint, then none is answered ≥ 500, every refusal has a detail and nothing refused changed the database', async () => {
  const { token: writer, posts: written } = await author(svc.base, 'author@example.com', 4);
  const { token: other, posts: othersPosts } = await author(svc.base, 'other@example.com', 2);
  const postIds = [...written, ...othersPosts];
  await call(svc.base, '/posts/', { token: other, json: { title: 'draft', content: 'c', published: false } });
  await vote(svc.base, other, postIds[0], 1);
  const authorId = (
    (await call(svc.base, `/posts/${String(postIds[0])}`, { token: writer })).body as { user_id: number }
  ).user_id;

  const doc = (await call(svc.base, '/openapi.json')).body as Parameters<typeof operationsOf>[0];
  const ops = operationsOf(doc);
  const hostile = hostileRequests(ops, { postIds, authorId, writer, other });
  const families: Record<string, number> = {};

  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const answered: { status: number }[] = [];
  const violations: string[] = [];
  let sent = 0;
  let transportErrors = 0;
  let before = await digest();
  const started = Date.now();
  const describe = (r: HostileRequest) =>
    `${r.method} ${r.path.slice(0, 200)} [${r.label}] ${JSON.stringify(r.headers).slice(0, 200)} body=${r.body?.subarray(0, 120).toString() ?? ''}`;

  await fc.assert(
    fc.asyncProperty(hostile, async (r) => {
      // 50 violations say enough; the rest of the run would only add time (a hanging family costs seconds each).
      if (violations.length >= 50) return;
      sent += 1;
      for (const family of r.families ?? []) families[family] = (families[family] ?? 0) + 1;
      let res: Awaited<ReturnType<typeof request>>;
      try {
        res = await request(svc.port, r, agent);
      } catch (error) {
        transportErrors += 1;
        violations.push(`transport error ${String(error)}: ${describe(r)}`);
        before = await digest();
        return;
      }
      answered.push({ status: res.status });
      const after = await digest();
      const problems = answerProblems(r, res, after === before);
      if (problems.length > 0 && violations.length < 50)
        violations.push(
          `${problems.join(', ')} → ${String(res.status)} ${res.body.slice(0, 200)}: ${describe(r)}`,
        );
      before = after;
    }),
    { seed: SEED, numRuns: RUNS, endOnFailure: true },
  );
  agent.destroy();

  const live = (await call(svc.base, '/healthz/live')).status;
  const ready = (await call(svc.base, '/healthz/ready')).status;
  const { emails, notNormalised, sameMailbox } = await storedAddresses();
  report('hostile input', {
    seed: SEED,
    requests: sent,
    operations: ops.length,
    statuses: statusCounts(answered),
    answers5xx: answered.filter((a) => a.status >= 500).length,
    violations: violations.length,
    transportErrors,
    seconds: Math.round((Date.now() - started) / 1000),
    live,
    ready,
    families: countsText(families),
    users: emails.length,
  });
  for (const family of FAMILIES)
    expect(`${family}: ${String(families[family] ?? 0)}`).not.toBe(`${family}: 0`);
  expect(notNormalised).toEqual([]);
  expect(sameMailbox).toBe(0);
  // The violations first: a run cut short after 50 of them fails here, with the list to read.
  expect(violations).toEqual([]);
  expect(sent).toBeGreaterThanOrEqual(RUNS);
  expect(live).toBe(200);
  expect(ready).toBe(200);
  expect(svc.child.exitCode).toBeNull();
});
