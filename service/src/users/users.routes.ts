import { randomBytes } from 'node:crypto';
import bcrypt from 'bcrypt';
import type { Router } from 'express';
import Joi from 'joi';
import { Semaphore } from '../concurrency';
import { confirmSoFar } from '../db/confirmed';
import type { Database } from '../db/connection';
import { isUnconfirmed } from '../db/errors';
import { ApiError, methodNotAllowed } from '../http/errors';
import { formBody, jsonBody } from '../http/body';
import { sendJson } from '../http/json';
import { signAccessToken, type TokenKey } from '../http/tokens';
import { validate } from '../http/validation';
import { normaliseEmail } from './email';
import { userSchema } from './user';
import { createUser, findUserByEmail, replacePasswordHash } from './users.repository';
import { bcryptComparable, loginForm, userCreate } from './users.schemas';

export interface UsersOptions {
  bcryptRounds: number;
  /** How many bcrypt hashes and checks run at once (PASSWORD_HASH_CONCURRENCY). */
  passwordHashConcurrency: number;
  /** The signing key (SECRET_KEY's, tokenKeys), which the authentication verifies with too. */
  signing: TokenKey;
  accessTokenExpireMinutes: number;
  /** TOKEN_ISSUER: the `iss` and `aud` of the tokens signed. */
  tokenIssuer: string;
}

/** The login's answer. */
interface Token {
  access_token: string;
  token_type: 'bearer';
}

/** Its OpenAPI component is generated from this, checked against Token by the compiler; open, as User's. */
const tokenSchema = Joi.object<Token, true>({
  access_token: Joi.string()
    .required()
    .description(
      'HS256 JWT; header `kid` is the id of the signing key (derived from it, not secret), `sub` the user id, `exp` ACCESS_TOKEN_EXPIRE_MINUTES later.',
    ),
  token_type: Joi.string().valid('bearer').required(),
})
  .unknown()
  .meta({ className: 'Token' });

/** An unknown e-mail and a wrong password alike. */
const invalidCredentials = (): ApiError => new ApiError(403, 'Invalid Credentials');

/**
 * Whether the account `id` stands, once the synchronous standby has it (confirmSoFar): a token
 * names its account by id alone, and an account whose registration a cancel left on the primary
 * alone may be lost in a failover, its id then given to the next account registered, which the
 * token would act as. While no standby confirms, no login gets a token: 503. `rehash`, a write
 * the login makes first, waits for the standby too, and its 503 is the same.
 */
async function accountStands(db: Database, id: number, rehash?: () => Promise<void>): Promise<boolean> {
  try {
    await rehash?.();
    return await confirmSoFar(db, id);
  } catch (error) {
    if (!isUnconfirmed(error)) throw error;
    throw new ApiError(
      503,
      'The database cannot confirm the account right now; try again shortly',
      {},
      { 'Retry-After': '1' },
      error,
    );
  }
}

/** Registration and the form login, added to the app's one API router (app.ts). */
export function usersRoutes(router: Router, db: Database, options: UsersOptions): void {
  // bcrypt runs on libuv's threadpool, which request decompression (zlib) shares: bounding how
  // many hashes run at once leaves the other threads to the rest of the traffic. A login that
  // waits here waits for a turn, whatever its outcome, so a failed one still costs what a
  // successful one does.
  const hashing = new Semaphore(options.passwordHashConcurrency);
  const hash = (password: string) => hashing.run(() => bcrypt.hash(password, options.bcryptRounds));
  const compare = (password: string, against: string) => hashing.run(() => bcrypt.compare(password, against));

  router
    .route('/users/')
    .post(...jsonBody, async (req, res) => {
      const input = validate(userCreate, req.body, 'body');
      const user = await createUser(db, input.email, await hash(input.password));
      if (!user) throw new ApiError(409, `A user with email ${input.email} already exists`);
      sendJson(res.status(201), user);
    })
    .all(methodNotAllowed(['POST']));

  // Compared against when the e-mail is unknown, at the cost every hash has once its owner logged
  // in since BCRYPT_ROUNDS last changed.
  const dummyHash = hash(randomBytes(18).toString('base64'));

  router
    .route('/login')
    .post(...formBody, async (req, res) => {
      const form = validate(loginForm, req.body, 'body');
      // The registration's normalisation, so any form of an address finds its one account; an
      // address registration would refuse matches nobody, after the same work.
      const address = normaliseEmail(form.username);
      const user = address.ok ? await findUserByEmail(db, address.email) : undefined;
      // Registration refuses what bcrypt would not compare in full, so such a password never matches.
      const comparable = bcryptComparable(form.password);
      const matches = await compare(form.password, user?.password ?? (await dummyHash));
      if (!user || !matches || !comparable) throw invalidCredentials();
      // A hash made at another cost is made again at this one: until it is, a wrong password for
      // this account takes that cost's time, which tells it apart from an unknown e-mail.
      const rehash =
        bcrypt.getRounds(user.password) === options.bcryptRounds
          ? undefined
          : async () => replacePasswordHash(db, user.id, user.password, await hash(form.password));
      // Deleted since the look-up: no account for the token to name.
      if (!(await accountStands(db, user.id, rehash))) throw invalidCredentials();
      sendJson(res, {
        access_token: signAccessToken(
          user.id,
          options.signing,
          options.accessTokenExpireMinutes,
          options.tokenIssuer,
        ),
        token_type: 'bearer',
      } satisfies Token);
    })
    .all(methodNotAllowed(['POST']));
}

/**
 * The OpenAPI parts of registration and login (the app hands them to docs/openapi.ts): the request
 * bodies, generated from the schemas that validate them, what the answers hold (the user's shape in
 * user.ts), and the comments below.
 */
export const usersDocs = {
  tags: [{ name: 'Users' }, { name: 'Authentication' }],
  bodies: [userCreate, loginForm],
  answers: [userSchema, tokenSchema],
  // Both the TypeScript source (tests, tsx) and the compiled file keep the comments.
  apis: [__filename],
};

/**
 * @openapi
 * /users/:
 *   post:
 *     tags: [Users]
 *     summary: Register a user
 *     description: >
 *       Creates an account. The e-mail is normalised (Unicode NFKC, the domain per UTS #46) and
 *       stored in that form; it is unique ignoring letter case. Invisible or formatting characters,
 *       or a local part or domain label mixing scripts, are 422. Only this exact path
 *       answers (no `/users`), because the proxy rate-limits it: 10 requests a minute per client
 *       address, shared with `/login`.
 *     requestBody:
 *       required: true
 *       content:
 *         application/json:
 *           schema: { $ref: '#/components/schemas/UserCreate' }
 *     responses:
 *       201:
 *         description: The user, without the password.
 *         content:
 *           application/json:
 *             schema: { $ref: '#/components/schemas/User' }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       409: { $ref: '#/components/responses/Conflict' }
 *       413: { $ref: '#/components/responses/PayloadTooLarge' }
 *       415: { $ref: '#/components/responses/UnsupportedMediaType' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       429: { $ref: '#/components/responses/TooManyRequests' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 */

/**
 * @openapi
 * /login:
 *   post:
 *     tags: [Authentication]
 *     summary: Log in for an access token
 *     description: >
 *       OAuth2 password-style form login: `username` is the e-mail address, normalised as at
 *       registration. The token comes only in this body (no cookie), which a foreign origin cannot
 *       read. The form must be UTF-8 (no other charset). An unknown e-mail and a
 *       wrong password get the same 403 after the same work, so e-mails cannot be probed (a
 *       password hashed before BCRYPT_ROUNDS changed is hashed again at its next login). A token
 *       names its account by id, so none is issued until the synchronous standby has the account:
 *       after a registration answered 503, and whenever no standby confirms, a login is 503. Only this
 *       exact path answers; the proxy rate-limits it (10 a minute per client address, shared with
 *       `/users/`).
 *     requestBody:
 *       required: true
 *       content:
 *         application/x-www-form-urlencoded:
 *           schema: { $ref: '#/components/schemas/LoginForm' }
 *     responses:
 *       200:
 *         description: A bearer token.
 *         content:
 *           application/json:
 *             schema: { $ref: '#/components/schemas/Token' }
 *       400: { $ref: '#/components/responses/BadRequest' }
 *       403: { $ref: '#/components/responses/InvalidCredentials' }
 *       413: { $ref: '#/components/responses/PayloadTooLarge' }
 *       415: { $ref: '#/components/responses/UnsupportedMediaType' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       429: { $ref: '#/components/responses/TooManyRequests' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 */
