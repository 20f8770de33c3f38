/** What the suites send by hand: tokens signed without jsonwebtoken, raw bytes on a socket. */
import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { TEST_SECRET } from './env';

const tokenPart = (value: object): string => Buffer.from(JSON.stringify(value)).toString('base64url');

/**
 * A token for `userId` signed by hand with the service's secret: jsonwebtoken's sign adds, drops or
 * refuses claims, and these tokens must carry exactly the header and claims written here.
 */
export function handSignedToken(
  userId: number,
  payload: Record<string, unknown>,
  header: Record<string, unknown> = {},
): string {
  const unsigned = `${tokenPart({ alg: 'HS256', typ: 'JWT', ...header })}.${tokenPart({ sub: String(userId), ...payload })}`;
  return `${unsigned}.${createHmac('sha256', TEST_SECRET).update(unsigned).digest('base64url')}`;
}

/** A token that says `alg: none` and has no signature. */
export const unsignedToken = (payload: object): string =>
  `${tokenPart({ alg: 'none', typ: 'JWT' })}.${tokenPart(payload)}.`;

/**
 * Writes `bytes` (one character a byte) on a socket of its own, then collects the answer, decoded
 * per chunk, until `complete` says it is whole, the server closes or `waitMs` passes. A socket error
 * fails the exchange unless `ignoreErrors`: then what came before the close is the answer.
 */
export async function rawExchange(
  port: number,
  bytes: string,
  options: {
    waitMs: number;
    encoding: BufferEncoding;
    complete?: (text: string) => boolean;
    ignoreErrors?: boolean;
  },
): Promise<{ text: string; closed: boolean; firstByteMs: number }> {
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const started = Date.now();
  let text = '';
  /** Milliseconds from sending to the first byte of the answer (Infinity if none came). */
  let firstByteMs = Infinity;
  /** Whether the server closed the connection (rather than the answer being whole first). */
  const ended = new Promise<boolean>((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => {
      if (text === '') firstByteMs = Date.now() - started;
      text += chunk.toString(options.encoding);
      if (options.complete?.(text)) resolve(false);
    });
    socket.on('close', () => {
      resolve(true);
    });
    socket.on('error', (error) => {
      if (!options.ignoreErrors) reject(error);
    });
  });
  socket.write(bytes, 'latin1');
  // An unref'd timer: one still pending cannot keep the test worker alive after the last test.
  const closed = await Promise.race([ended, delay(options.waitMs, false, { ref: false })]);
  socket.destroy();
  return { text, closed, firstByteMs };
}
