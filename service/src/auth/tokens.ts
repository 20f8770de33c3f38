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
