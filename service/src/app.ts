import express, { type Express } from 'express';
import { withRequestBudget } from './db/budget';
import type { Database } from './db/connection';
import { openApiDocument as buildOpenApiDocument } from './docs/openapi';
import { docsRouter } from './docs/page';
import { healthDocs, healthRouter, type ShutdownState } from './health';
import { requireAuth } from './http/auth';
import { closeAfterOversizedBody } from './http/body';
import { crossOrigin } from './http/cors';
import { errorHandler, notFound } from './http/errors';
import { requireHost } from './http/protocol';
import { trustProxies } from './http/proxies';
import { oneAnswerAtATime, unsentAnswersBounded } from './http/pipelining';
import { requestLog } from './http/request-log';
import { exactRouter } from './http/router';
import { inSequence } from './http/sequence';
import { apiHeaders } from './http/security-headers';
import { tokenIssuer, tokenKeys } from './http/tokens';
import type { Logger } from './logger';
import { createMetrics, type Metrics } from './metrics';
import { visiblePost, visiblePostOwner } from './posts/posts.repository';
import { postsDocs, postsRoutes } from './posts/posts.routes';
import type { Settings } from './settings';
import { requestSpans, routeSpans } from './tracing';
import { findUserById } from './users/users.repository';
import { usersDocs, usersRoutes } from './users/users.routes';
import { votesDocs, votesRoutes } from './votes/votes.routes';

let document: object | undefined;

/**
 * The OpenAPI document, collected here from what each feature exports, in the order of its tags
 * and paths; built once (swagger-jsdoc reads the route files).
 */
export function openApiDocument(): object {
  document ??= buildOpenApiDocument([usersDocs, postsDocs, votesDocs, healthDocs]);
  return document;
}

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
  // req.ip reads X-Forwarded-For only through these hops; the request log trusts the same ones.
  const trustProxy = trustProxies(settings.trustedProxies);
  app.set('trust proxy', trustProxy);

  // The request's span first, so a request the checks after it refuse is traced too.
  app.use(inSequence(requestSpans, requireHost, closeAfterOversizedBody));
  const cors = crossOrigin(settings.corsAllowedOrigins);
  // The probes come before the request log and metrics: they are neither logged nor counted.
  // Mounted at their prefix, so no other request walks their routes.
  app.use('/healthz', healthRouter(db, logger, cors, shutdown));
  app.use(
    inSequence(
      routeSpans,
      // Every other request's waits for a connection and its statements share one budget
      // (budget.ts); the probes keep their own bound.
      (_req, _res, next) => {
        withRequestBudget(settings.db.statementTimeoutMs, next);
      },
      metrics.httpMiddleware,
      requestLog(logger, trustProxy),
      // Behind the log and metrics, which record a pipelined request abandoned while it waits,
      // and an answer whose connection is closed because it went unread.
      unsentAnswersBounded,
      oneAnswerAtATime,
      apiHeaders,
      cors,
    ),
  );

  // SECRET_KEY signs; it and SECRET_KEYS_ACCEPTED verify. Built once (see tokenKey).
  const keys = tokenKeys(settings.secretKey, settings.secretKeysAccepted);
  const auth = requireAuth(
    (id) => findUserById(db, id),
    keys,
    settings.accessTokenExpireMinutes,
    settings.tokenCacheSize,
    tokenIssuer(settings.tokenIssuer, settings.accessTokenExpireMinutes * 60),
  );
  metrics.observeTokenChecks(() => auth.checks());
  // Every API route in one router, the busiest first: a request walks one route list, not one
  // router per module.
  const api = exactRouter();
  postsRoutes(api, db, auth, settings);
  // A post the voter cannot read cannot be voted on: the posts' visibility rule, handed to votes.
  votesRoutes(api, db, auth, {
    visible: async (postId, userId) => (await visiblePostOwner(db, postId, { userId })) !== undefined,
    query: visiblePost,
  });
  usersRoutes(api, db, { ...settings, signing: keys.signing });
  app.use(api);
  app.use(docsRouter(openApiDocument()));

  app.use(notFound);
  app.use(errorHandler(logger));
  return app;
}
