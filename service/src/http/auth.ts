import type { RequestHandler } from 'express';
import { Passport } from 'passport';
import { ExtractJwt, Strategy as JwtStrategy } from 'passport-jwt';
import { errorFields } from '../db/errors';
import { MAX_ID } from '../db/limits';
import { notAuthenticated, type ApiError } from './errors';
import { VerifiedTokens } from './token-cache';
import { claimsAcceptable, TOKEN_ALGORITHM, verificationKey, type TokenKeys } from './tokens';

declare global {
  // passport types req.user as Express.User; ours is the API's user.
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface User {
      id: number;
      email: string;
      created_at: Date;
    }
  }
}

/** A user as the API shows one (never the password hash): the caller, a post's owner. */
export type User = Express.User;

/** The user a token's subject names, or undefined when there is none (users.repository's findUserById). */
export type FindUser = (id: number) => Promise<User | undefined>;

const NOT_AUTHENTICATED = 'Not authenticated';
const INVALID = 'Could not validate credentials';
const NO_KEY = new Error('the token names no key of this service');

/** 401 for a token that is valid but whose user does not exist (any more). */
export const unknownCaller = (): ApiError => notAuthenticated(INVALID);

/** How tokens were checked since start: by a look-up (cached), the full way and accepted, refused. */
export interface TokenChecks {
  cached: number;
  verified: number;
  refused: number;
  /** Tokens held (VerifiedTokens) and the most it holds (TOKEN_CACHE_SIZE). */
  held: number;
  capacity: number;
}

/**
 * Bearer-token authentication for the routes. Between requests only verified tokens are kept
 * (VerifiedTokens); a user is looked up on every request, as each route asks.
 */
export interface Authentication {
  /** Before a route: the token, then its user (one query); the route reads caller(req). */
  user: RequestHandler;
  /**
   * Before a route that looks its caller up in its own statement (one round trip, not two): the
   * token only. The route reads callerId(req) and answers unknownCaller() when that user is gone.
   */
  token: RequestHandler;
  /**
   * Behind `token`, for a route about to answer without its statement (a bad query): 401 comes
   * before 422 (API.md), so the caller's user is confirmed first. Behind `user`, for a route
   * whose write found the caller's rows gone: whether their user went too. Throws unknownCaller().
   */
  confirm(req: Express.Request): Promise<void>;
  /** For the metrics (auth_token_*). */
  checks(): TokenChecks;
}

/** The user ids `token` has let through, per request (req.user is only ever a confirmed user). */
const tokenSubjects = new WeakMap<Express.Request, number>();

/**
 * Checks signature (HS256 only, with the key the token's `kid` names: verificationKey) and the
 * registered claims (claimsAcceptable: expiry, issue time, lifetime), through passport-jwt, the
 * first time a token is seen, and by a look-up in `tokenCacheSize` verified tokens (VerifiedTokens:
 * its `exp`, `iat` and `nbf` checked again) after that; and, as each route asks, that the user
 * exists (findUser, which the app hands in). Answers 401 itself, before any body is read.
 */
export function requireAuth(
  findUser: FindUser,
  keys: TokenKeys,
  accessTokenExpireMinutes: number,
  tokenCacheSize: number,
): Authentication {
  // Its own cache and Passport instance, so apps built with different keys (tests) never share either.
  const cache = new VerifiedTokens(tokenCacheSize);
  const counts = { cached: 0, verified: 0, refused: 0 };
  // passport-jwt's own extractor, so a look-up reads the very token it would verify.
  const bearerToken = ExtractJwt.fromAuthHeaderAsBearerToken();
  const passport = new Passport();
  passport.use(
    new JwtStrategy(
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
      // The verified "user" is only the subject's id, in an object (passport wants it truthy).
      (
        req: Express.Request,
        payload: Record<string, unknown>,
        done: (error: unknown, subject?: { id: number } | false) => void,
      ) => {
        const now = Date.now() / 1000;
        if (!claimsAcceptable(payload, now, accessTokenExpireMinutes * 60)) {
          done(null, false);
          return;
        }
        const sub = payload.sub;
        if (typeof sub !== 'string' || !/^[1-9][0-9]{0,9}$/.test(sub) || Number(sub) > MAX_ID) {
          done(null, false);
          return;
        }
        const token = bearerToken(req as Parameters<typeof bearerToken>[0]);
        // claimsAcceptable has checked that exp and iat are numbers, and nbf one when present.
        if (token) cache.add(token, Number(sub), payload as { exp: number; iat: number; nbf?: number }, now);
        done(null, { id: Number(sub) });
      },
    ),
  );

  /**
   * A token verified before: `verified` with its user id at once. Otherwise passport's check, then
   * `verified`; 401 for any bad token.
   */
  const checkToken =
    (verified: (req: Express.Request, id: number, next: (error?: unknown) => void) => void): RequestHandler =>
    (req, res, next) => {
      const token = bearerToken(req);
      const known = token ? cache.subject(token, Date.now() / 1000) : undefined;
      if (known !== undefined) {
        counts.cached++;
        verified(req, known, next);
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
          verified(req, subject.id, next);
        },
      ) as RequestHandler;
      authenticate(req, res, next);
    };

  return {
    user: checkToken((req, id, next) => {
      findUser(id).then((user) => {
        if (!user) {
          next(unknownCaller());
          return;
        }
        req.user = user;
        next();
      }, next);
    }),
    token: checkToken((req, id, next) => {
      tokenSubjects.set(req, id);
      next();
    }),
    async confirm(req) {
      if (!(await findUser(req.user?.id ?? callerId(req)))) throw unknownCaller();
    },
    checks: () => ({ ...counts, held: cache.size, capacity: cache.capacity }),
  };
}

/** The user id of a request `token` let through; its user is the route's to confirm. */
export function callerId(req: Express.Request): number {
  const id = tokenSubjects.get(req);
  if (id === undefined) throw notAuthenticated(NOT_AUTHENTICATED);
  return id;
}

/** The authenticated caller; only valid behind Authentication.user. */
export function caller(req: Express.Request): User {
  if (!req.user) throw notAuthenticated(NOT_AUTHENTICATED);
  return req.user;
}
