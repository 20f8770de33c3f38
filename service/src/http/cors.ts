import cors from 'cors';
import type { RequestHandler } from 'express';

/**
 * The cross-origin rules of the API: listed origins only, echoed (never `*`); preflights answer
 * 200 on any path with every method and the requested headers. Shared by the app and by the
 * probes (health.ts), which are mounted ahead of the request log and metrics.
 */
export function crossOrigin(allowedOrigins: string[]): RequestHandler {
  const rules = cors({
    // A list (even an empty one) makes cors echo only listed origins and always add Vary: Origin.
    origin: allowedOrigins,
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
    // allowedHeaders left unset: the preflight's requested headers are echoed.
    // Link: the lists' next page (RFC 8288), for clients that walk them.
    exposedHeaders: ['X-Request-Id', 'WWW-Authenticate', 'Retry-After', 'Link'],
    optionsSuccessStatus: 200,
    maxAge: 600,
  });
  // A request without Origin is no cross-origin call (browsers send Origin on every one), so the
  // Access-Control-* headers would say nothing to it: it gets only the Vary: Origin a cache needs,
  // and the cors package's work is spent where it answers something. OPTIONS always goes through.
  return (req, res, next) => {
    if (req.headers.origin !== undefined || req.method === 'OPTIONS') {
      rules(req, res, next);
      return;
    }
    res.vary('Origin');
    next();
  };
}
