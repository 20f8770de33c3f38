import express, { type Express } from 'express';
import { requireAuth } from './auth/auth.middleware';
import { authRoutes } from './auth/auth.routes';
import { tokenKeys } from './auth/tokens';
import type { Database } from './db/connection';
import { healthRouter, type ShutdownState } from './health';
import { crossOrigin } from './http/cors';
import { docsRouter } from './http/docs';
import { errorHandler, notFound } from './http/errors';
import { requireHost } from './http/protocol';
import { closeAfterOversizedBody } from './http/validation';
import { requestLog } from './http/request-log';
import { exactRouter } from './http/router';
import { apiHeaders } from './http/security-headers';
import type { Logger } from './logger';
import { createMetrics, type Metrics } from './metrics';
import { postsRoutes } from './posts/posts.routes';
import type { Settings } from './settings';
import { usersRoutes } from './users/users.routes';
import { votesRoutes } from './votes/votes.routes';

export interface AppDeps {
  db: Database;
  settings: Settings;
  logger: Logger;
  /** The server passes the registry it serves on the metrics port; without one the app makes its own. */
  metrics?: Metrics;
  /** The server's shutdown state, which readiness reports; without one the app never shuts down. */
  shutdown?: ShutdownState;
}

/** The Express app; it never listens, so tests build it in-process against their own database. */
export function createApp({
  db,
  settings,
  logger,
  metrics = createMetrics(db, logger),
  shutdown,
}: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  // /login and /users/ are rate-limited by the proxy at exactly those paths; strict,
  // case-sensitive routing keeps /login/, /Login or /users from reaching them unlimited.
  app.set('strict routing', true);
  app.set('case sensitive routing', true);

  app.use(requireHost);
  app.use(closeAfterOversizedBody);
  const cors = crossOrigin(settings.corsAllowedOrigins);
  // The probes come before the request log and metrics: they are neither logged nor counted.
  // Mounted at their prefix, so no other request walks their routes.
  app.use('/healthz', healthRouter(db, logger, cors, shutdown));
  app.use(metrics.httpMiddleware);
  app.use(requestLog(logger));
  app.use(apiHeaders);
  app.use(cors);

  // SECRET_KEY signs; it and SECRET_KEYS_ACCEPTED verify. Built once (see tokenKey).
  const keys = tokenKeys(settings.secretKey, settings.secretKeysAccepted);
  const auth = requireAuth(db, keys, settings.accessTokenExpireMinutes);
  // Every API route in one router, the busiest first: a request walks one route list, not one
  // router per module.
  const api = exactRouter();
  postsRoutes(api, db, auth);
  votesRoutes(api, db, auth);
  authRoutes(api, db, { ...settings, signing: keys.signing });
  usersRoutes(api, db, settings.bcryptRounds);
  app.use(api);
  app.use(docsRouter());

  app.use(notFound);
  app.use(errorHandler(logger));
  return app;
}
