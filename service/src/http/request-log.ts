import { randomUUID } from 'node:crypto';
import type { RequestHandler } from 'express';
import type { Logger } from '../logger';
import { settledStatus } from './pipelining';
import type { TrustProxy } from './proxies';

declare module 'http' {
  interface IncomingMessage {
    /** The request id: a valid X-Request-Id from a trusted proxy, else a new UUID. */
    id: string;
  }
}

const REQUEST_ID = /^[\w.:-]{1,128}$/;

/**
 * Gives each request its id (echoed in X-Request-Id) and, once it is answered or abandoned, logs
 * one line: id, method, path without the query string, client address, status (499 when the client closed the
 * connection before the answer was sent, as nginx logs it) and duration in ms. No header and
 * no body goes into it, so neither a token nor a password can reach the log. Nothing is built
 * when the level is off (no per-request child logger, as pino-http makes).
 */
export function requestLog(logger: Logger, trustProxy: TrustProxy): RequestHandler {
  return (req, res, next) => {
    // Only the proxy's id ties this line to its access log; a client's could name any other request.
    const given = trustProxy(req.socket.remoteAddress) ? req.headers['x-request-id'] : undefined;
    const id = typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    req.id = id;
    res.setHeader('X-Request-Id', id);
    const started = Date.now();
    // 'close' comes exactly once for every request, answered or abandoned by the client, also
    // for a pipelined one abandoned before its turn (pipelining.ts).
    res.once('close', () => {
      const status = settledStatus(res);
      const level = status >= 500 ? 'error' : 'info';
      if (!logger.isLevelEnabled(level)) return;
      logger[level](
        {
          // req.ip: the peer, or the client X-Forwarded-For names through trusted proxies only.
          req: { id, method: req.method, path: req.originalUrl.split('?')[0], client: req.ip },
          res: { status },
          responseTime: Date.now() - started,
        },
        res.writableFinished ? 'request completed' : 'request aborted',
      );
    });
    next();
  };
}
