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

  /** Each rung's server; the ones after express are the express rung plus exactly one piece of the app. */
  const rungs: Record<string, () => RequestListener> = {
    knex: () => (req, res) => {
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
    },
    express: () => bareExpress(),
    cors: () => bareExpress(crossOrigin(settings.corsAllowedOrigins)),
    metrics: () => bareExpress(createMetrics(db, logger).httpMiddleware),
    'request-log': () => bareExpress(requestLog(logger, trustProxies(settings.trustedProxies))),
    'security-headers': () => bareExpress(apiHeaders),
    protocol: () => bareExpress(requireHost, closeAfterOversizedBody),
    // Express's default, as the app runs.
    etag: () => bareExpress().set('etag', 'weak'),
    app: () => createApp({ db, settings, logger }),
  };
  const step = process.env.LADDER_STEP ?? '';
  const rung = Object.hasOwn(rungs, step) ? rungs[step] : undefined;
  if (!rung)
    throw new Error(
      'LADDER_STEP must be knex, express, cors, metrics, request-log, security-headers, protocol, etag or app',
    );
  const server = createServer(rung());
  server.listen(settings.port, '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo;
    process.stdout.write(`${JSON.stringify({ port, step, msg: 'listening' })}\n`);
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
