/**
 * The steps between the reference and the service, for `npm run bench`: the public list answered
 * by the service's own knex repository behind bare `node:http` (RUNG=knex), behind bare Express
 * (RUNG=express), and by the whole app without the process around it (RUNG=app). Measured one
 * after the other, they show which layer costs what. Reads the service's settings from the
 * environment, as the service does.
 */
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { createApp } from '../service/src/app';
import { openDatabase } from '../service/src/database';
import { createLogger } from '../service/src/logger';
import { listPosts } from '../service/src/posts/posts.repository';
import { loadSettings } from '../service/src/settings';

async function main(): Promise<void> {
  const settings = loadSettings();
  const logger = createLogger(settings.logLevel);
  const db = await openDatabase(settings, logger);
  const firstPage = async () => (await listPosts(db, 'public', { limit: 10, skip: 0 })).posts;

  let listener: RequestListener;
  switch (process.env.RUNG) {
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
    case 'express': {
      const app = express();
      app.get('/posts/public', async (_req, res) => {
        res.json(await firstPage());
      });
      listener = app;
      break;
    }
    case 'app':
      listener = createApp({ db, settings, logger });
      break;
    default:
      throw new Error('RUNG must be knex, express or app');
  }
  const server = createServer(listener);
  server.listen(settings.port, '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo;
    process.stdout.write(`${JSON.stringify({ port, rung: process.env.RUNG, msg: 'listening' })}\n`);
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
