import jwt from 'jsonwebtoken';

export const TOKEN_ALGORITHM = 'HS256';

/** An HS256 token whose `sub` is the user id as a string, as JWT expects. */
export function signAccessToken(userId: number, secretKey: string, expireMinutes: number): string {
  return jwt.sign({}, secretKey, {
    algorithm: TOKEN_ALGORITHM,
    subject: String(userId),
    expiresIn: expireMinutes * 60,
  });
}
