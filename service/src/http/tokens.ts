import { createSecretKey, type KeyObject } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { keyId } from '../settings';

export const TOKEN_ALGORITHM = 'HS256';

/** An HMAC key and its id (keyId), which the tokens it signs carry as their `kid` header. */
export interface TokenKey {
  kid: string;
  key: KeyObject;
}

/**
 * The HMAC key, built once: handed a string, jsonwebtoken would first try (and fail) to read it
 * as a PEM key on every sign and verify.
 */
function tokenKey(secretKey: string): TokenKey {
  return { kid: keyId(secretKey), key: createSecretKey(Buffer.from(secretKey, 'utf8')) };
}

/** The keys of one process, built once at start: one signs, all verify. */
export interface TokenKeys {
  /** SECRET_KEY: every token is signed with it. */
  signing: TokenKey;
  /** Every key a token is accepted from, by id: SECRET_KEY first, then SECRET_KEYS_ACCEPTED. */
  byKid: ReadonlyMap<string, KeyObject>;
}

export function tokenKeys(secretKey: string, accepted: readonly string[]): TokenKeys {
  const signing = tokenKey(secretKey);
  const byKid = new Map([[signing.kid, signing.key]]);
  for (const { kid, key } of accepted.map(tokenKey)) {
    // Settings refuse a repeated key; two keys with one id (a 64-bit collision) must not pass unseen.
    if (byKid.has(kid)) throw new Error(`two token keys share the id ${kid}`);
    byKid.set(kid, key);
  }
  return { signing, byKid };
}

/**
 * An HS256 token whose `sub` is the user id as a string, as JWT expects, `kid` its key's id, and
 * `iss` and `aud` both TOKEN_ISSUER: the release is the one that issues it and the one it is for.
 */
export function signAccessToken(
  userId: number,
  signing: TokenKey,
  expireMinutes: number,
  issuer: string,
): string {
  return jwt.sign({}, signing.key, {
    algorithm: TOKEN_ALGORITHM,
    keyid: signing.kid,
    subject: String(userId),
    issuer,
    audience: issuer,
    expiresIn: expireMinutes * 60,
  });
}

/** Whose tokens a process accepts: TOKEN_ISSUER's, and until when the older ones that name nobody. */
export interface TokenIssuer {
  /** The `iss` and `aud` a token must carry, both. */
  name: string;
  /**
   * Until this time (seconds since the epoch) a token with neither `iss` nor `aud`, as releases
   * before TOKEN_ISSUER signed them, is accepted too: one token lifetime after the process
   * started, so a rolling upgrade signs nobody out and such tokens stop working after it.
   */
  legacyUntilSeconds: number;
}

/** The issuer of a process started at `startedMs` whose tokens live `lifetimeSeconds`. */
export function tokenIssuer(name: string, lifetimeSeconds: number, startedMs = Date.now()): TokenIssuer {
  return { name, legacyUntilSeconds: startedMs / 1000 + lifetimeSeconds };
}

/** A token signed before tokens named their issuer: neither `iss` nor `aud`. */
export const isLegacyToken = (payload: Record<string, unknown>): boolean =>
  !('iss' in payload) && !('aud' in payload);

/**
 * The `kid` of a token's header: a string, absent (undefined), or null when the header is
 * unreadable or asks for what the service does not do. `crit` names extensions a verifier must
 * understand or refuse the token (RFC 7515 §4.1.11): the service understands none, and issues no
 * token with it. `b64` (RFC 7797) changes what the signature covers; it is never issued either.
 */
function headerKid(token: string): unknown {
  const dot = token.indexOf('.');
  if (dot < 0) return null;
  try {
    const header: unknown = JSON.parse(Buffer.from(token.slice(0, dot), 'base64url').toString('utf8'));
    if (typeof header !== 'object' || header === null || 'crit' in header || 'b64' in header) return null;
    return (header as { kid?: unknown }).kid;
  } catch {
    return null;
  }
}

/** Whether `key` made the token's signature; expiry and the other claims are checked afterwards. */
function signedWith(token: string, key: KeyObject): boolean {
  try {
    jwt.verify(token, key, { algorithms: [TOKEN_ALGORITHM], ignoreExpiration: true, ignoreNotBefore: true });
    return true;
  } catch {
    return false;
  }
}

/**
 * The one key a token is verified with, or undefined when none of ours may have signed it. A
 * `kid` names its key: one Map lookup a request; an unknown or non-string `kid` has none. A token
 * without `kid`: with only SECRET_KEY that key, otherwise the first key (SECRET_KEY, then the
 * accepted ones) whose signature it bears, at the cost of one more verification for such a token.
 */
export function verificationKey(keys: TokenKeys, token: string): KeyObject | undefined {
  const kid = headerKid(token);
  if (typeof kid === 'string') return keys.byKid.get(kid);
  if (kid !== undefined) return undefined;
  if (keys.byKid.size === 1) return keys.signing.key;
  for (const key of keys.byKid.values()) if (signedWith(token, key)) return key;
  return undefined;
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
 * ACCESS_TOKEN_EXPIRE_MINUTES, `nbf` (if any) numeric and not in the future beyond the skew,
 * `iss` and `aud` both the issuer's name (or, within its legacy window, neither). The service
 * never issues `jti`, so a token carrying one is not its own. `sub` is checked by the caller.
 */
export function claimsAcceptable(
  payload: Record<string, unknown>,
  nowSeconds: number,
  maxLifetimeSeconds: number,
  issuer: TokenIssuer,
): boolean {
  const { exp, iat, nbf } = payload;
  if (!isTime(exp) || !isTime(iat)) return false;
  if (exp <= nowSeconds || iat > nowSeconds + CLOCK_SKEW_SECONDS) return false;
  if (exp - iat <= 0 || exp - iat > maxLifetimeSeconds) return false;
  if (nbf !== undefined && (!isTime(nbf) || nbf > nowSeconds + CLOCK_SKEW_SECONDS)) return false;
  if ('jti' in payload) return false;
  if (isLegacyToken(payload)) return nowSeconds < issuer.legacyUntilSeconds;
  // One string each, as signAccessToken writes them; an audience list is another service's token.
  return payload.iss === issuer.name && payload.aud === issuer.name;
}
