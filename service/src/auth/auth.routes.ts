import { randomBytes } from 'node:crypto';
import bcrypt from 'bcrypt';
import type { Router } from 'express';
import type { Database } from '../db/connection';
import { ApiError, methodNotAllowed } from '../http/errors';
import { formBody, validate } from '../http/validation';
import { normaliseEmail } from '../users/email';
import { findUserByEmail } from '../users/users.repository';
import { bcryptComparable } from '../users/users.schemas';
import { loginForm } from './auth.schemas';
import { signAccessToken, type TokenKey } from './tokens';

export interface LoginOptions {
  /** The signing key (SECRET_KEY's, tokenKeys), which the authentication verifies with too. */
  signing: TokenKey;
  accessTokenExpireMinutes: number;
  bcryptRounds: number;
}

/** The form login, added to the app's one API router (app.ts). */
export function authRoutes(router: Router, db: Database, options: LoginOptions): void {
  // Compared against when the e-mail is unknown, at the same cost as a real hash.
  const dummyHash = bcrypt.hash(randomBytes(18).toString('base64'), options.bcryptRounds);

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
      const matches = await bcrypt.compare(form.password, user?.password ?? (await dummyHash));
      if (!user || !matches || !comparable) throw new ApiError(403, 'Invalid Credentials');
      res.json({
        access_token: signAccessToken(user.id, options.signing, options.accessTokenExpireMinutes),
        token_type: 'bearer',
      });
    })
    .all(methodNotAllowed(['POST']));
}

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
 *       wrong password get the same 403 after the same work, so e-mails cannot be probed. Only this
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
 *       403: { $ref: '#/components/responses/InvalidCredentials' }
 *       413: { $ref: '#/components/responses/PayloadTooLarge' }
 *       415: { $ref: '#/components/responses/UnsupportedMediaType' }
 *       422: { $ref: '#/components/responses/ValidationError' }
 *       429: { $ref: '#/components/responses/TooManyRequests' }
 *       503: { $ref: '#/components/responses/ServiceUnavailable' }
 */
