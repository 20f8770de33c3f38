/** Waiting on what the runner started: an HTTP probe and a bounded poll. */
import { request } from 'node:http';
import { pollUntil } from '../../testing/poll';

/** GET on 127.0.0.1 with a fresh connection; the status, or 0 when there is no answer in time. */
export function probe(
  port: number,
  path: string,
  timeoutMs: number,
): Promise<{ status: number; body: string }> {
  return new Promise((resolvePromise) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        resolvePromise({ status: res.statusCode ?? 0, body });
      });
      res.on('error', () => {
        resolvePromise({ status: 0, body: '' });
      });
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => {
      resolvePromise({ status: 0, body: '' });
    });
    req.end();
  });
}

/** Polls until check() is true (testing/poll's pollUntil); throws once timeoutMs has passed. */
export async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  everyMs = 200,
): Promise<void> {
  const { held } = await pollUntil(check, (ok) => ok, { withinMs: timeoutMs, everyMs });
  if (!held) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
