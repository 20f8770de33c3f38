/**
 * Retries through the ingress (chart: proxy-next-upstream "error", proxy-next-upstream-tries 3;
 * chart/README.md, Retries). Next to the ready replicas the driver lists a third, broken endpoint of
 * the API Service; the proxy's round robin sends every third try to it. Only the local runner can
 * add one (on kind this block is skipped). The requests carry no token and no limited path, so the
 * rate-limit case's counter is untouched: each one is answered by a replica (200 public list, 401
 * otherwise) or by the proxy itself.
 */
import { answeredByService, send, describeAnswer, type Answer } from './client';
import { driverFromEnv, type BrokenEndpointControl } from './drivers';

const control = driverFromEnv().brokenEndpoint;
// NGINX Gateway Fabric writes no proxy_next_upstream (nginx's default, error timeout, holds) and
// balances with `random two least_conn`, so which try lands on the broken endpoint is chance: these
// cases state the chart's ingress-nginx settings; chart/README.md compares the two paths.
const proxy = process.env.K8S_PROXY ?? 'ingress-nginx';
const describeLocal = control && proxy === 'ingress-nginx' ? describe : describe.skip;
const missing = () => Promise.reject(new Error('this driver has no broken endpoint'));
const broken: BrokenEndpointControl = control ?? { open: missing, failures: missing, close: missing };

/** One call per method, with the status a replica gives it. */
const calls = [
  { method: 'GET', path: '/posts/public', status: 200 },
  { method: 'PUT', path: '/posts/1', status: 401, body: '{"title":"t","content":"c","published":true}' },
  { method: 'DELETE', path: '/posts/1', status: 401 },
  { method: 'POST', path: '/posts/', status: 401, body: '{"title":"t","content":"c"}' },
] as const;
type Method = (typeof calls)[number]['method'];

interface Timed {
  method: Method;
  answer: Answer;
  ms: number;
}

/** Each call `times` times, one after the other, each on a new connection. */
async function sendEach(methods: Method[], times: number): Promise<Timed[]> {
  const results: Timed[] = [];
  for (const call of calls.filter((c) => methods.includes(c.method)))
    for (let i = 0; i < times; i++) {
      const startedAt = Date.now();
      const answer = await send(call.method, call.path, {
        fresh: true,
        ...('body' in call ? { body: call.body, headers: { 'Content-Type': 'application/json' } } : {}),
      });
      results.push({ method: call.method, answer, ms: Date.now() - startedAt });
    }
  return results;
}

/** The broken endpoint's failed tries by method, from the proxy's error log. */
async function failedTries(): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const line of await broken.failures()) {
    const method = /request: "([A-Z]+) /.exec(line)?.[1] ?? 'unknown';
    counts[method] = (counts[method] ?? 0) + 1;
  }
  return counts;
}

const statusOf = (method: Method) => calls.find((c) => c.method === method)?.status;
/** What a client saw: the replica's own answer, or the proxy's status. */
const seen = (r: Timed) => ({
  method: r.method,
  status: r.answer.status,
  by: answeredByService(r.answer) ? 'replica' : 'proxy',
  ...(r.answer.error ? { error: describeAnswer(r.answer) } : {}),
});

describeLocal(
  'retries: a broken third endpoint next to the replicas (proxy-next-upstream "error", 3 tries)',
  () => {
    beforeAll(async () => {
      expect((await send('GET', '/healthz/ready', { fresh: true })).status).toBe(200);
    });

    afterEach(async () => {
      await broken.close();
    });

    test('When a replica is gone but still listed (connection refused), then every method is retried and answered by a replica', async () => {
      await broken.open('refuse');
      const results = await sendEach(['GET', 'PUT', 'DELETE', 'POST'], 6);
      // Nothing was sent to the refused endpoint, so even a POST may go to another replica.
      expect(results.map(seen)).toEqual(
        results.map((r) => ({ method: r.method, status: statusOf(r.method), by: 'replica' })),
      );
      const tries = await failedTries();
      for (const method of ['GET', 'PUT', 'DELETE', 'POST'])
        expect({ method, refused: (tries[method] ?? 0) > 0 }).toEqual({ method, refused: true });
    }, 60_000);

    test('When a replica dies after reading the request, then GET, PUT and DELETE are retried and a POST is not (502)', async () => {
      await broken.open('reset');
      const results = await sendEach(['GET', 'PUT', 'DELETE', 'POST'], 6);
      const tries = await failedTries();
      for (const method of ['GET', 'PUT', 'DELETE'] as const) {
        const mine = results.filter((r) => r.method === method);
        expect(mine.map(seen)).toEqual(mine.map(() => ({ method, status: statusOf(method), by: 'replica' })));
        expect({ method, broken: (tries[method] ?? 0) > 0 }).toEqual({ method, broken: true });
      }
      // nginx never re-sends a POST once it reached a replica: each one the broken endpoint got is a 502.
      const posts = results.filter((r) => r.method === 'POST').map(seen);
      const failedPosts = posts.filter((p) => p.status !== 401);
      expect(failedPosts.length).toBeGreaterThan(0);
      expect(failedPosts).toEqual(failedPosts.map(() => ({ method: 'POST', status: 502, by: 'proxy' })));
      expect(tries.POST).toBe(failedPosts.length);
    }, 60_000);

    test('When a replica does not answer, then after the 3 s read time-out there is no retry: one 504 and no second copy elsewhere', async () => {
      await broken.open('hang');
      // Round robin over three endpoints: one of every three tries goes to the silent one.
      const results = await sendEach(['GET', 'PUT', 'DELETE'], 3);
      const tries = await failedTries();
      for (const method of ['GET', 'PUT', 'DELETE'] as const) {
        const mine = results.filter((r) => r.method === method);
        const timedOut = mine.filter((r) => r.answer.status === 504);
        // Every other answer is the replica's own.
        expect(mine.filter((r) => r.answer.status !== 504).map(seen)).toEqual(
          mine
            .filter((r) => r.answer.status !== 504)
            .map(() => ({ method, status: statusOf(method), by: 'replica' })),
        );
        // Each try that timed out became the client's answer: it was not sent again to a replica.
        expect({ method, timedOut: timedOut.length }).toEqual({ method, timedOut: tries[method] ?? 0 });
        expect(timedOut.length).toBeGreaterThan(0);
        for (const r of timedOut) {
          expect(seen(r)).toEqual({ method, status: 504, by: 'proxy' });
          // One read time-out (3 s), not three.
          expect(r.ms).toBeGreaterThanOrEqual(2900);
          expect(r.ms).toBeLessThan(6000);
        }
      }
    }, 90_000);
  },
);
