import type { Request, RequestHandler, Response } from 'express';
import { Passport } from 'passport';
import { ExtractJwt, Strategy as JwtStrategy } from 'passport-jwt';
import { confirmSoFar } from '../db/confirmed';
import type { Database } from '../db/connection';
import { errorFields } from '../db/errors';
import { MAX_ID } from '../db/limits';
import { ApiError, notAuthenticated } from './errors';
import { VerifiedTokens } from './token-cache';
import {
  claimsAcceptable,
  isLegacyToken,
  TOKEN_ALGORITHM,
  verificationKey,
  type TokenIssuer,
  type TokenKeys,
} from './tokens';

/** What authentication needs of a user: its id. The domain's user (users/user.ts) is one. */
export interface Identified {
  id: number;
}

/** The user a token's subject names, or undefined when there is none (users.repository's findUserById). */
export type FindUser<U extends Identified> = (id: number) => Promise<U | undefined>;

const NOT_AUTHENTICATED = 'Not authenticated';
const INVALID = 'Could not validate credentials';
const NO_KEY = new Error('the token names no key of this service');

/** 401 for a token that is valid but whose user does not exist (any more). */
export const unknownCaller = (): ApiError => notAuthenticated(INVALID);

/**
 * `answer` (a 404 for something gone) once the synchronous standby has all `userId` committed so
 * far, as what is gone may be their own change left on the primary alone (confirmSoFar); else 401,
 * the same locked read of their row telling, as Caller.unlessGone would, that their user is gone.
 */
export async function confirmedUnlessGone(db: Database, userId: number, answer: ApiError): Promise<ApiError> {
  return (await confirmSoFar(db, userId)) ? answer : unknownCaller();
}

/** How tokens were checked since start: by a look-up (cached), the full way and accepted, refused. */
export interface TokenChecks {
  cached: number;
  verified: number;
  refused: number;
  /** Tokens held (VerifiedTokens) and the most it holds (TOKEN_CACHE_SIZE). */
  held: number;
  capacity: number;
}

/** The caller of a request that Authentication.required let through. */
export interface Caller<U extends Identified> {
  /** Their user, looked up before the route ran. */
  readonly user: U;
  /**
   * `answer` (a 404 or 409 the caller's own rows decided) while their user exists, else 401: their
   * rows may be missing because the user was deleted since the look-up. Asked only on such answers.
   */
  unlessGone(answer: ApiError): Promise<ApiError>;
}

/**
 * Bearer-token authentication: a signed-in route makes one call, `required` or `callerFoundBy`.
 * Between requests only verified tokens are kept (VerifiedTokens); the user is looked up on every
 * request.
 */
export interface Authentication<U extends Identified> {
  /** Before a route: the token, then its user (one query), 401 if either fails; read by caller(req). */
  required: RequestHandler;
  /** The caller of a request `required` let through. */
  caller(req: Request): Caller<U>;
  /**
   * For a route whose own statement finds the caller (one round trip, not two), in place of
   * `required`: the token, then `find` with the caller's id, whose undefined (no such user) is 401.
   * A client error `find` throws (a bad query) reaches only a caller whose user exists: 401 first.
   */
  callerFoundBy<T>(req: Request, res: Response, find: (userId: number) => Promise<T | undefined>): Promise<T>;
  /** For the metrics (auth_token_*). */
  checks(): TokenChecks;
}

// passport-jwt's own extractor, so a look-up reads the very token it would verify.
const bearerToken = ExtractJwt.fromAuthHeaderAsBearerToken();

/**
 * passport-jwt's strategy: the signature with the key the token's `kid` names, then the registered
 * claims and the subject; a token it accepts and that names an issuer is kept in `cache`. The
 * verified "user" is only the subject's id, in an object (passport wants it truthy).
 */
function jwtStrategy(
  keys: TokenKeys,
  lifetimeSeconds: number,
  issuer: TokenIssuer,
  cache: VerifiedTokens,
): JwtStrategy {
  return new JwtStrategy(
    {
      jwtFromRequest: bearerToken,
      passReqToCallback: true,
      secretOrKeyProvider: (_req: unknown, token: string, done: (error: unknown, key?: Buffer) => void) => {
        const key = verificationKey(keys, token);
        // jsonwebtoken takes a KeyObject as it is (see tokenKey); the typings only list string | Buffer.
        if (key) done(null, key as unknown as Buffer);
        else done(NO_KEY);
      },
      algorithms: [TOKEN_ALGORITHM],
      // jsonwebtoken would refuse an `nbf` a second ahead; claimsAcceptable allows the documented
      // skew. The typings mark the option deprecated, yet passport-jwt has no other way to it.
      // eslint-disable-next-line @typescript-eslint/no-deprecated
      jsonWebTokenOptions: { ignoreNotBefore: true },
    },
    (
      req: Express.Request,
      payload: Record<string, unknown>,
      done: (error: unknown, subject?: { id: number } | false) => void,
    ) => {
      const now = Date.now() / 1000;
      const sub = payload.sub;
      if (
        !claimsAcceptable(payload, now, lifetimeSeconds, issuer) ||
        typeof sub !== 'string' ||
        !/^[1-9][0-9]{0,9}$/.test(sub) ||
        Number(sub) > MAX_ID
      ) {
        done(null, false);
        return;
      }
      const token = bearerToken(req as Parameters<typeof bearerToken>[0]);
      // claimsAcceptable has checked that exp and iat are numbers, and nbf one when present.
      // A token that names no issuer is never kept: its window may close before its exp.
      if (token && !isLegacyToken(payload))
        cache.add(token, Number(sub), payload as { exp: number; iat: number; nbf?: number }, now);
      done(null, { id: Number(sub) });
    },
  );
}

/** The token's subject to `verified`: from the cache at once, else after passport's check; 401 to next. */
const tokenChecker =
  (
    passport: InstanceType<typeof Passport>,
    cache: VerifiedTokens,
    counts: Omit<TokenChecks, 'held' | 'capacity'>,
  ) =>
  (req: Request, res: Response, next: (error?: unknown) => void, verified: (id: number) => void): void => {
    const token = bearerToken(req);
    const known = token ? cache.subject(token, Date.now() / 1000) : undefined;
    if (known !== undefined) {
      counts.cached++;
      verified(known);
      return;
    }
    const authenticate = passport.authenticate(
      'jwt',
      { session: false },
      (error: unknown, subject: { id: number } | false, info: unknown) => {
        if (error) {
          next(error);
          return;
        }
        if (!subject) {
          counts.refused++;
          const missing = errorFields(info).message === 'No auth token';
          next(notAuthenticated(missing ? NOT_AUTHENTICATED : INVALID));
          return;
        }
        counts.verified++;
        verified(subject.id);
      },
    ) as RequestHandler;
    authenticate(req, res, next);
  };

/**
 * Checks signature (HS256 only, with the key the token's `kid` names: verificationKey) and the
 * registered claims (claimsAcceptable: expiry, issue time, lifetime, issuer), through passport-jwt, the
 * first time a token is seen, and by a look-up in `tokenCacheSize` verified tokens (VerifiedTokens:
 * its `exp`, `iat` and `nbf` checked again) after that; and, as each route asks, that the user
 * exists (findUser, which the app hands in). Answers 401 itself, before any body is read.
 */
export function requireAuth<U extends Identified>(
  findUser: FindUser<U>,
  keys: TokenKeys,
  accessTokenExpireMinutes: number,
  tokenCacheSize: number,
  issuer: TokenIssuer,
): Authentication<U> {
  // Its own cache and Passport instance, so apps built with different keys (tests) never share either.
  const cache = new VerifiedTokens(tokenCacheSize);
  const counts = { cached: 0, verified: 0, refused: 0 };
  const passport = new Passport();
  passport.use(jwtStrategy(keys, accessTokenExpireMinutes * 60, issuer, cache));

  const checkToken = tokenChecker(passport, cache, counts);

  const callers = new WeakMap<Request, Caller<U>>();
  const exists = async (id: number): Promise<boolean> => (await findUser(id)) !== undefined;

  return {
    required: (req, res, next) => {
      checkToken(req, res, next, (id) => {
        findUser(id).then((user) => {
          if (!user) {
            next(unknownCaller());
            return;
          }
          callers.set(req, {
            user,
            unlessGone: async (answer) => ((await exists(id)) ? answer : unknownCaller()),
          });
          next();
        }, next);
      });
    },
    caller(req) {
      const known = callers.get(req);
      if (!known) throw notAuthenticated(NOT_AUTHENTICATED);
      return known;
    },
    async callerFoundBy(req, res, find) {
      const id = await new Promise<number>((resolve, reject) => {
        checkToken(req, res, reject, resolve);
      });
      let found;
      try {
        found = await find(id);
      } catch (error) {
        // Authentication comes first (the specification): the route's own 4xx only once its caller is confirmed.
        if (error instanceof ApiError && error.status < 500 && !(await exists(id))) throw unknownCaller();
        throw error;
      }
      if (found === undefined) throw unknownCaller();
      return found;
    },
    checks: () => ({ ...counts, held: cache.size, capacity: cache.capacity }),
  };
}
