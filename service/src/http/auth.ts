import type { RequestHandler } from 'express';
import { Passport } from 'passport';
import { ExtractJwt, Strategy as JwtStrategy } from 'passport-jwt';
import { errorFields } from '../db/errors';
import { MAX_ID } from '../db/limits';
import { notAuthenticated } from './errors';
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

/**
 * Bearer-token authentication: signature (HS256 only, with the key the token's `kid` names:
 * verificationKey), the registered claims (claimsAcceptable: expiry, issue time, lifetime) and an
 * existing user (findUser, which the app hands in), checked on every request; nothing is kept
 * between requests. Answers 401 itself, before any body is read.
 */
export function requireAuth(
  findUser: FindUser,
  keys: TokenKeys,
  accessTokenExpireMinutes: number,
): RequestHandler {
  // Its own Passport instance, so apps built with different secrets (tests) never share state.
  const passport = new Passport();
  passport.use(
    new JwtStrategy(
      {
        jwtFromRequest: ExtractJwt.fromAuthHeaderAsBearerToken(),
        secretOrKeyProvider: (_req: unknown, token: string, done: (error: unknown, key?: Buffer) => void) => {
          const key = verificationKey(keys, token);
          // jsonwebtoken takes a KeyObject as it is (see tokenKey); the typings only list string | Buffer.
          if (key) done(null, key as unknown as Buffer);
          else done(NO_KEY);
        },
        algorithms: [TOKEN_ALGORITHM],
      },
      (payload: Record<string, unknown>, done: (error: unknown, user?: User | false) => void) => {
        if (!claimsAcceptable(payload, Date.now() / 1000, accessTokenExpireMinutes * 60)) {
          done(null, false);
          return;
        }
        const sub = payload.sub;
        if (typeof sub !== 'string' || !/^[1-9][0-9]{0,9}$/.test(sub) || Number(sub) > MAX_ID) {
          done(null, false);
          return;
        }
        findUser(Number(sub)).then(
          (user) => {
            done(null, user ?? false);
          },
          (error: unknown) => {
            done(error);
          },
        );
      },
    ),
  );

  return (req, res, next) => {
    const authenticate = passport.authenticate(
      'jwt',
      { session: false },
      (error: unknown, user: User | false, info: unknown) => {
        if (error) {
          next(error);
          return;
        }
        if (!user) {
          const missing = errorFields(info).message === 'No auth token';
          next(notAuthenticated(missing ? NOT_AUTHENTICATED : INVALID));
          return;
        }
        req.user = user;
        next();
      },
    ) as RequestHandler;
    authenticate(req, res, next);
  };
}

/** The authenticated caller; only valid behind requireAuth. */
export function caller(req: Express.Request): User {
  if (!req.user) throw notAuthenticated(NOT_AUTHENTICATED);
  return req.user;
}
