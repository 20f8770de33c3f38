import bcrypt from 'bcrypt';
import type { Router } from 'express';
import type { Database } from '../db/connection';
import { ApiError, methodNotAllowed } from '../http/errors';
import { jsonBody, validate } from '../http/validation';
import { createUser } from './users.repository';
import { userCreate } from './users.schemas';

/** Registration, added to the app's one API router (app.ts). */
export function usersRoutes(router: Router, db: Database, bcryptRounds: number): void {
  router
    .route('/users/')
    .post(...jsonBody, async (req, res) => {
      const input = validate(userCreate, req.body, 'body');
      const hash = await bcrypt.hash(input.password, bcryptRounds);
      const user = await createUser(db, input.email, hash);
      if (!user) throw new ApiError(409, `A user with email ${input.email} already exists`);
      res.status(201).json(user);
    })
    .all(methodNotAllowed(['POST']));
}

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
