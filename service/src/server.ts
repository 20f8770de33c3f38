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
import { createTerminus } from '@godaddy/terminus';
import { createApp } from './app';
import { startBackfills, type BackfillRunner } from './db/backfill';
import type { Database } from './db/connection';
import type { ShutdownState } from './health';
import { rawProblem, writeProblem } from './http/errors';
import { clientErrorProblem } from './http/protocol';
import { deferContinue } from './http/body';
import type { Logger } from './logger';
import { createMetrics, createMetricsServer } from './metrics';
import type { Settings } from './settings';
import { flushTraces } from './tracing';

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

function expectationFailed(res: ServerResponse): void {
  writeProblem(
    res,
    // The header's value is not echoed: nothing a client sends is reflected in an answer.
    { status: 417, detail: 'The Expect header cannot be met; only 100-continue is supported' },
    { close: false },
  );
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

/**
 * The API listener's time-outs. The proxy sends a request's headers and body at once and gives up
 * on an upstream after 3 s without a byte (chart/README.md), so these only ever cut off a client
 * that reaches the pod directly and dawdles, and what it holds goes with it.
 */
const HTTP_TIMEOUTS = {
  /** An idle keep-alive connection: above nginx's upstream keep-alive (60 s), so nginx closes first. */
  keepAliveMs: 65_000,
  /** From a request's first byte to the end of its headers. */
  headersMs: 10_000,
  /** From a request's first byte to the end of its body (at most 100 kB: body.ts). */
  requestMs: 30_000,
  /** A connection, mid-request or mid-answer, on which no byte moves either way. */
  idleMs: 30_000,
} as const;

/** The API listener, serving the app, with the time-outs above. */
function apiServer(app: RequestListener): Server {
  // requireHostHeader off: the app answers a missing (or doubled) Host as problem+json (requireHost).
  const server = createServer({ requireHostHeader: false }, app);
  // Longer than nginx's upstream keep-alive (60 s), so the proxy always closes idle sockets first.
  server.keepAliveTimeout = HTTP_TIMEOUTS.keepAliveMs;
  server.headersTimeout = HTTP_TIMEOUTS.headersMs;
  server.requestTimeout = HTTP_TIMEOUTS.requestMs;
  // A connection where nothing moves either way (a client that stopped reading an answer, or
  // stopped sending) is closed, and whatever it still held with it.
  server.timeout = HTTP_TIMEOUTS.idleMs;
  return server;
}

/** What runs beside the API listener, and stops when it does. */
interface Companions {
  metricsServer: Server;
  /** Started once the API listens: a migration's data change waits for the release to serve. */
  background: { backfills?: BackfillRunner };
}

/** The shutdown sequence (see startServer), from the signal to the exit. */
function shutDownOnSignal(
  server: Server,
  { settings, db, logger }: { settings: Settings; db: Database; logger: Logger },
  shutdown: ShutdownState,
  { metricsServer, background }: Companions,
): void {
  createTerminus(server, {
    // No health checks here: the app serves the probes (health.ts) and reads `shutdown`.
    signals: ['SIGTERM', 'SIGINT'],
    useExit0: true,
    timeout: settings.shutdownTimeoutSeconds * 1000,
    beforeShutdown: async () => {
      shutdown.started = true;
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
      await background.backfills?.stop();
      await close(metricsServer);
      await db.close();
      logger.info('metrics listener and database closed');
    },
    onShutdown: async () => {
      // The last requests' spans, still in the exporter's batch. A collector that cannot take them
      // costs those spans only: the shutdown itself went as it should, and exits 0.
      await flushTraces().catch((error: unknown) => {
        logger.warn({ err: error }, 'the last spans could not be exported: they are lost');
      });
      logger.info('shutdown complete');
      // A shutdown the process began itself for a failure (the embedded database's WAL) exits non-zero.
      if (process.exitCode) process.exit(process.exitCode);
    },
    logger: (message, error) => {
      logger.error({ err: error }, message);
    },
  });
}

/** What Node would answer on its own, before the app (Expect, CONNECT, malformed HTTP): as the app would. */
function answerWhatNodeWould(server: Server): void {
  // Expect: 100-continue: the 100 waits until a body parser is about to read (see deferContinue),
  // so a body that will be refused (401, 413, 415...) is never invited. It is then served as any
  // request, by every 'request' listener (the app, and terminus's tracker of busy connections).
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    // Node takes any value that mentions 100-continue (`100-continue, foo`) for one; RFC 9110
    // §10.1.1 defines that one value alone, and an expectation with more in it cannot be met.
    if (req.headers.expect?.trim().toLowerCase() !== '100-continue') {
      expectationFailed(res);
      return;
    }
    deferContinue(req);
    server.emit('request', req, res);
  });
  // Any other expectation cannot be met; Node would answer a bare 417.
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    expectationFailed(res);
  });
  // Without a listener Node drops a CONNECT without a word; this is not a proxy.
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    socket.end(
      rawProblem({
        status: 405,
        detail: 'CONNECT is not served here',
        headers: { Allow: 'GET, HEAD, POST, PUT, DELETE, OPTIONS' },
      }),
    );
  });

  // Malformed HTTP never reaches Express; Node would answer a bare 400. Give it the same problem shape.
  server.on('clientError', (error: NodeJS.ErrnoException, socket) => {
    if (!socket.writable || error.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    socket.end(rawProblem(clientErrorProblem(error.code)));
  });
}

/**
 * Listens, and shuts down under terminus: on SIGTERM readiness (health.ts) turns 503 at once, the
 * listener keeps serving for SHUTDOWN_DELAY_SECONDS (the proxy takes the pod out meanwhile), then
 * stops accepting, lets in-flight requests finish, closes the database and exits 0. Metrics are
 * served on a listener of their own (METRICS_PORT), never on the API's.
 */
export async function startServer(settings: Settings, db: Database, logger: Logger): Promise<RunningServer> {
  const metrics = createMetrics(db, logger);
  const metricsServer = createMetricsServer(metrics.registry, logger);
  // It must never be what keeps a process alive: the API listener decides that.
  metricsServer.unref();
  const shutdown: ShutdownState = { started: false };
  const background: Companions['background'] = {};
  const server = apiServer(createApp({ db, settings, logger, metrics, shutdown }));
  shutDownOnSignal(server, { settings, db, logger }, shutdown, { metricsServer, background });
  answerWhatNodeWould(server);

  const metricsPort = await listen(metricsServer, settings.metricsPort);
  // Whoever closes the API listener (terminus, a test) closes the metrics one with it.
  server.once('close', () => {
    void close(metricsServer);
    void background.backfills?.stop();
  });
  let port: number;
  try {
    port = await listen(server, settings.port);
  } catch (error) {
    await close(metricsServer);
    throw error;
  }
  background.backfills = startBackfills(db, logger);
  return { server, port, metricsServer, metricsPort };
}
