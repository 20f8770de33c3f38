import { Router, type RequestHandler, type Response } from 'express';
import { DATABASE_CHECK_TIMEOUT_MS, withTimeout, type Database } from './db/connection';
import { errorWithHint } from './db/errors';
import { ApiError, methodNotAllowed, writeProblem } from './http/errors';
import { sendJson } from './http/json';
import { exactRouter } from './http/router';
import type { Logger } from './logger';

/** Set by the server when shutdown starts (terminus's beforeShutdown); readiness then answers 503. */
export interface ShutdownState {
  started: boolean;
}

/**
 * The probes. The app mounts them ahead of its request log and metrics (probes are polled every
 * few seconds and are neither logged nor counted), behind the same CORS rules as every API path.
 * Liveness stays 200 while the process drains: only readiness takes the pod out of rotation.
 */
export function healthRouter(
  db: Database,
  logger: Logger,
  cors: RequestHandler,
  shutdown: ShutdownState = { started: false },
): Router {
  const router = exactRouter();
  const answer = (res: Response, status: number, body: object) => {
    sendJson(res.status(status).set('Cache-Control', 'no-store'), body);
  };
  // problem+json like every other error.
  const unavailable = (res: Response, detail: string) => {
    writeProblem(res, new ApiError(503, detail, {}, { 'Cache-Control': 'no-store' }), { close: false });
  };

  router
    .route('/live')
    .all(cors)
    .get((_req, res) => {
      answer(res, 200, { status: 'ok' });
    })
    .all(methodNotAllowed(['GET', 'HEAD']));

  router
    .route('/ready')
    .all(cors)
    .get(async (_req, res) => {
      if (shutdown.started) {
        unavailable(res, 'The service is shutting down');
        return;
      }
      let standby: boolean;
      // On a connection of its own (Database.isStandby): requests filling the pool are load, not a
      // database that has gone, and load alone must not take every replica out of rotation.
      try {
        standby = await withTimeout(
          db.isStandby(),
          DATABASE_CHECK_TIMEOUT_MS,
          `the database did not answer within ${DATABASE_CHECK_TIMEOUT_MS} ms`,
        );
      } catch (error) {
        logger.warn(errorWithHint(error), 'readiness check failed');
        // No driver message reaches the prober.
        unavailable(res, 'The database did not answer within 1 s');
        return;
      }
      // During a failover the address may lead to a standby for a while: reads would work,
      // writes would not, so the pod is taken out until a primary answers there.
      if (standby) {
        logger.warn('readiness check failed: the database is a read-only standby');
        unavailable(res, 'The database is a read-only standby');
        return;
      }
      answer(res, 200, { status: 'ok' });
    })
    .all(methodNotAllowed(['GET', 'HEAD']));

  return router;
}

/** The probes' OpenAPI part (the app hands it to docs/openapi.ts): the comment below. */
export const healthDocs = {
  tags: [{ name: 'Health' }],
  // Both the TypeScript source (tests, tsx) and the compiled file keep the comment.
  apis: [__filename],
};

/**
 * @openapi
 * /healthz/live:
 *   get:
 *     tags: [Health]
 *     summary: Liveness
 *     description: HEAD answers alike, without a body; a query string is ignored; other methods are 405.
 *     responses:
 *       200: { description: 'The process runs (also while it drains after SIGTERM).' }
 *       405: { description: 'Not GET or HEAD; `Allow: GET, HEAD`.' }
 * /healthz/ready:
 *   get:
 *     tags: [Health]
 *     summary: Readiness
 *     description: HEAD answers alike, without a body; a query string is ignored; other methods are 405.
 *     responses:
 *       405: { description: 'Not GET or HEAD; `Allow: GET, HEAD`.' }
 *       200: { description: 'The database answered within 1 s, on a connection kept for the probe (a pool busy with requests does not delay it), and it is a primary (it takes writes).' }
 *       503: { description: 'The database did not answer in time, or it is a read-only standby (during a failover), or the process is shutting down.' }
 */
