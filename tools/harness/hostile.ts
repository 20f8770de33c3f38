/** What both hostile-input suites send by hand: tokens signed without jsonwebtoken. */
import { createHmac } from 'node:crypto';
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
