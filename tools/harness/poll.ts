/** Waiting for what a suite cannot be told about: read it again until it holds or time runs out. */
import { request } from 'node:http';

export interface Polled<T> {
  /** The last value read: the one that held, or the last before time ran out. */
  value: T;
  held: boolean;
  /** From the start to the end of the read that held (or of the last read). */
  ms: number;
}

/**
 * Reads at once, then every `everyMs` (0: straight again), until `holds` is true of a value or
 * `withinMs` has passed. A read that throws ends the wait with its error: a read that may fail
 * says what a failure counts as.
 */
export async function pollUntil<T>(
  read: () => T | Promise<T>,
  holds: (value: T) => boolean,
  options: { withinMs: number; everyMs?: number },
): Promise<Polled<T>> {
  const startedAt = Date.now();
  for (;;) {
    const value = await read();
    const ms = Date.now() - startedAt;
    if (holds(value)) return { value, held: true, ms };
    if (ms >= options.withinMs) return { value, held: false, ms };
    await new Promise((resolve) => setTimeout(resolve, options.everyMs ?? 100));
  }
}

/** Polls until check() is true; throws, naming `what`, once `withinMs` has passed. */
export async function waitFor(
  what: string,
  withinMs: number,
  check: () => boolean | Promise<boolean>,
  everyMs = 200,
): Promise<void> {
  const { held } = await pollUntil(check, (ok) => ok, { withinMs, everyMs });
  if (!held) throw new Error(`timed out after ${withinMs} ms waiting for ${what}`);
}

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
