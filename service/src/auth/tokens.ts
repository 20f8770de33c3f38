import { createSecretKey, type KeyObject } from 'node:crypto';
import jwt from 'jsonwebtoken';

export const TOKEN_ALGORITHM = 'HS256';

/**
 * The HMAC key, built once. Handed a string, jsonwebtoken first tries to read it as a PEM key on
 * every sign and verify, and that failed parse (a thrown error) was over a quarter of the CPU of
 * an authenticated request under load.
 */
export function tokenKey(secretKey: string): KeyObject {
  return createSecretKey(Buffer.from(secretKey, 'utf8'));
}

/** An HS256 token whose `sub` is the user id as a string, as JWT expects. */
export function signAccessToken(userId: number, key: KeyObject, expireMinutes: number): string {
  return jwt.sign({}, key, {
    algorithm: TOKEN_ALGORITHM,
    subject: String(userId),
    expiresIn: expireMinutes * 60,
  });
}

/**
 * How far ahead of this replica's clock another replica's may run: a token stamped (`iat`, `nbf`)
 * up to this many seconds in the future is accepted. `exp` gets no such allowance: a token is
 * refused the second it expires.
 */
export const CLOCK_SKEW_SECONDS = 30;

const isTime = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);

/**
 * The registered claims (RFC 7519 §4.1) as the service issues them, checked after the signature:
 * `exp` and `iat` present and numeric, `exp` in the future (jsonwebtoken has checked that too),
 * `iat` not in the future beyond the skew, a lifetime `exp - iat` above 0 and not above
 * ACCESS_TOKEN_EXPIRE_MINUTES, `nbf` (if any) numeric and not in the future beyond the skew.
 * The service never issues `iss`, `aud` or `jti`, so a token carrying one is not its own.
 * `sub` is checked by the caller.
 */
export function claimsAcceptable(
  payload: Record<string, unknown>,
  nowSeconds: number,
  maxLifetimeSeconds: number,
): boolean {
  const { exp, iat, nbf } = payload;
  if (!isTime(exp) || !isTime(iat)) return false;
  if (exp <= nowSeconds || iat > nowSeconds + CLOCK_SKEW_SECONDS) return false;
  if (exp - iat <= 0 || exp - iat > maxLifetimeSeconds) return false;
  if (nbf !== undefined && (!isTime(nbf) || nbf > nowSeconds + CLOCK_SKEW_SECONDS)) return false;
  return !('iss' in payload || 'aud' in payload || 'jti' in payload);
}
