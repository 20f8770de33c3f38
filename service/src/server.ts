import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTerminus, type HealthCheckMap } from '@godaddy/terminus';
import { createApp } from './app';
import { crossOrigin } from './http/cors';
import { problemBody } from './http/errors';
import { clientErrorProblem, hostProblem, rawProblem, writeProblem } from './http/protocol';
import { deferContinue } from './http/validation';
import { withTimeout, type Database } from './database';
import type { Logger } from './logger';
import { createMetrics, createMetricsServer } from './metrics';
import type { Settings } from './settings';

export interface RunningServer {
  server: Server;
  port: number;
  /** The Prometheus listener; it closes with `server`. */
  metricsServer: Server;
  metricsPort: number;
}

function listen(server: Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

function close(server: Server): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    server.close(() => {
      resolve();
    });
    server.closeIdleConnections();
  });
}

const READY_TIMEOUT_MS = 1000;

/**
 * Serves the app under terminus, which owns health checks and shutdown: on SIGTERM readiness
 * turns 503 at once, the listener keeps serving for SHUTDOWN_DELAY_SECONDS (the proxy takes the
 * pod out meanwhile), then stops accepting, lets in-flight requests finish, closes the database
 * and exits 0. Metrics are served on a listener of their own (METRICS_PORT), never on the API's.
 */
export async function startServer(settings: Settings, db: Database, logger: Logger): Promise<RunningServer> {
  const metrics = createMetrics(db, logger);
  const metricsServer = createMetricsServer(metrics.registry, logger);
  // It must never be what keeps a process alive: the API listener decides that.
  metricsServer.unref();
  // requireHostHeader off: the dispatcher below answers a missing (or doubled) Host as problem+json.
  const server = createServer({ requireHostHeader: false }, createApp({ db, settings, logger, metrics }));
  // Longer than nginx's upstream keep-alive (60 s), so the proxy always closes idle sockets first.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  const unavailable = (detail: string) => problemBody(503, detail);
  const healthChecks: HealthCheckMap = {
    // Liveness stays 200 while the process drains: only readiness takes the pod out of rotation.
    '/healthz/live': () => Promise.resolve({}),
    '/healthz/ready': async ({ state }) => {
      if (state.isShuttingDown) {
        throw Object.assign(new Error('shutting down'), {
          statusResponse: unavailable('The service is shutting down'),
        });
      }
      try {
        await withTimeout(
          db.knex.raw('SELECT 1'),
          READY_TIMEOUT_MS,
          `the database did not answer within ${READY_TIMEOUT_MS} ms`,
        );
      } catch (error) {
        logger.warn({ err: error }, 'readiness check failed');
        // terminus sends statusResponse as the body: no library message reaches the prober.
        throw Object.assign(new Error('not ready'), {
          statusResponse: unavailable('The database did not answer within 1 s'),
        });
      }
      return {};
    },
    verbatim: true,
  };
  createTerminus(server, {
    healthChecks,
    statusOkResponse: { status: 'ok' },
    // Shutdown is answered by the readiness check itself, so liveness is not failed with it.
    sendFailuresDuringShutdown: false,
    headers: { 'Cache-Control': 'no-store' },
    signals: ['SIGTERM', 'SIGINT'],
    useExit0: true,
    timeout: settings.shutdownTimeoutSeconds * 1000,
    beforeShutdown: async () => {
      logger.info(
        { delaySeconds: settings.shutdownDelaySeconds, timeoutSeconds: settings.shutdownTimeoutSeconds },
        'shutdown started: readiness is 503, still serving',
      );
      await sleep(settings.shutdownDelaySeconds * 1000);
      logger.info(
        { timeoutSeconds: settings.shutdownTimeoutSeconds },
        'closing the listener and draining in-flight requests',
      );
    },
    onSignal: async () => {
      await close(metricsServer);
      await db.close();
      logger.info('metrics listener and database closed');
    },
    onShutdown: () => {
      logger.info('shutdown complete');
      return Promise.resolve();
    },
    logger: (message, error) => {
      logger.error({ err: error }, message);
    },
  });

  // terminus answers its paths before the app, whose CORS then never runs for them; the same rules
  // go in front of those paths here, so a browser's preflight or call to a probe is answered alike.
  // One listener runs terminus's (and its connection tracker's) in turn; a preflight, which cors
  // answers itself, reaches neither.
  const healthPaths = new Set(Object.keys(healthChecks).filter((key) => key.startsWith('/')));
  const cors = crossOrigin(settings.corsAllowedOrigins) as unknown as (
    req: IncomingMessage,
    res: ServerResponse,
    next: () => void,
  ) => void;
  const listeners = server.listeners('request') as RequestListener[];
  server.removeAllListeners('request');
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    for (const listener of listeners) listener(req, res);
  };
  const dispatch = (req: IncomingMessage, res: ServerResponse) => {
    // Node's own Host check answers a bare 400 and ignores a second Host; this one answers both.
    const hostError = hostProblem(req);
    if (hostError) {
      writeProblem(res, 400, hostError);
      return;
    }
    const [path = '', query] = (req.url ?? '').split('?', 2);
    if (!healthPaths.has(path)) {
      serve(req, res);
      return;
    }
    cors(req, res, () => {
      // Probes and load balancers may add a query string; terminus matches the bare path only.
      if (query !== undefined) req.url = path;
      if (req.method === 'GET' || req.method === 'HEAD') serve(req, res);
      else
        writeProblem(res, 405, `${req.method ?? ''} is not allowed here; use GET, HEAD`, {
          headers: { Allow: 'GET, HEAD' },
          close: false,
        });
    });
  };
  server.on('request', dispatch);
  // Expect: 100-continue: the 100 waits until a body parser is about to read (see deferContinue),
  // so a body that will be refused (401, 413, 415...) is never invited.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    deferContinue(req);
    dispatch(req, res);
  });
  // Any other expectation cannot be met; Node would answer a bare 417.
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    writeProblem(
      res,
      417,
      // The header's value is not echoed: nothing a client sends is reflected in an answer.
      'The Expect header cannot be met; only 100-continue is supported',
      { close: false },
    );
  });
  // Without a listener Node drops a CONNECT without a word; this is not a proxy.
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    socket.end(
      rawProblem(405, 'CONNECT is not served here', { Allow: 'GET, HEAD, POST, PUT, DELETE, OPTIONS' }),
    );
  });

  // Malformed HTTP never reaches Express; Node would answer a bare 400. Give it the same problem shape.
  server.on('clientError', (error: NodeJS.ErrnoException, socket) => {
    if (!socket.writable || error.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const { status, detail } = clientErrorProblem(error.code);
    socket.end(rawProblem(status, detail));
  });

  const metricsPort = await listen(metricsServer, settings.metricsPort);
  // Whoever closes the API listener (terminus, a test) closes the metrics one with it.
  server.once('close', () => {
    void close(metricsServer);
  });
  let port: number;
  try {
    port = await listen(server, settings.port);
  } catch (error) {
    await close(metricsServer);
    throw error;
  }
  return { server, port, metricsServer, metricsPort };
}
