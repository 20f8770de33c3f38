/**
 * The steps between the reference and the service, for `npm run bench`: the public list answered
 * by the service's own knex repository behind bare `node:http` (LADDER_STEP=knex), behind bare
 * Express (LADDER_STEP=express), bare Express plus exactly one piece of the app (LADDER_STEP=cors,
 * metrics, request-log, security-headers, protocol, etag), and by the whole app without the process
 * around it (LADDER_STEP=app). Measured one after the other, they show which layer costs what, each
 * piece on its own. Reads the service's settings from the environment, as the service does.
 */
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Express, type RequestHandler } from 'express';
import { createApp } from '../../service/src/app';
import { openDatabase } from '../../service/src/db/connection';
import { crossOrigin } from '../../service/src/http/cors';
import { requireHost } from '../../service/src/http/protocol';
import { trustProxies } from '../../service/src/http/proxies';
import { requestLog } from '../../service/src/http/request-log';
import { apiHeaders } from '../../service/src/http/security-headers';
import { closeAfterOversizedBody } from '../../service/src/http/body';
import { createLogger } from '../../service/src/logger';
import { createMetrics } from '../../service/src/metrics';
import { listPosts } from '../../service/src/posts/posts.repository';
import { loadSettings } from '../../service/src/settings';

async function main(): Promise<void> {
  const settings = loadSettings();
  const logger = createLogger(settings.logLevel);
  const db = await openDatabase(settings, logger);
  const firstPage = async () => (await listPosts(db, 'public', { limit: 10, skip: 0 })).posts;

  /**
   * Bare Express and the list route, with `pieces` mounted in front of it. ETag is off here (the
   * app's default is Express's weak ETag) so that the etag rung shows what it costs.
   */
  const bareExpress = (...pieces: RequestHandler[]): Express => {
    const app = express();
    app.disable('x-powered-by');
    app.set('etag', false);
    for (const piece of pieces) app.use(piece);
    app.get('/posts/public', async (_req, res) => {
      res.json(await firstPage());
    });
    return app;
  };

  let listener: RequestListener;
  switch (process.env.LADDER_STEP) {
    case 'knex':
      listener = (req, res) => {
        if (req.url !== '/posts/public') {
          res.writeHead(404).end();
          return;
        }
        firstPage().then(
          (posts) => {
            const text = JSON.stringify(posts);
            res.writeHead(200, {
              'Content-Type': 'application/json; charset=utf-8',
              'Content-Length': Buffer.byteLength(text),
            });
            res.end(text);
          },
          () => res.writeHead(503).end(),
        );
      };
      break;
    case 'express':
      listener = bareExpress();
      break;
    // Each of the following is the express rung plus exactly one piece of the app.
    case 'cors':
      listener = bareExpress(crossOrigin(settings.corsAllowedOrigins));
      break;
    case 'metrics':
      listener = bareExpress(createMetrics(db, logger).httpMiddleware);
      break;
    case 'request-log':
      listener = bareExpress(requestLog(logger, trustProxies(settings.trustedProxies)));
      break;
    case 'security-headers':
      listener = bareExpress(apiHeaders);
      break;
    case 'protocol':
      listener = bareExpress(requireHost, closeAfterOversizedBody);
      break;
    case 'etag': {
      const app = bareExpress();
      app.set('etag', 'weak'); // Express's default, as the app runs
      listener = app;
      break;
    }
    case 'app':
      listener = createApp({ db, settings, logger });
      break;
    default:
      throw new Error(
        'LADDER_STEP must be knex, express, cors, metrics, request-log, security-headers, protocol, etag or app',
      );
  }
  const server = createServer(listener);
  server.listen(settings.port, '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo;
    process.stdout.write(`${JSON.stringify({ port, step: process.env.LADDER_STEP, msg: 'listening' })}\n`);
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
