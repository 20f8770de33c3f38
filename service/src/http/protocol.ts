import type { IncomingMessage } from 'node:http';
import type { RequestHandler } from 'express';
import { writeProblem } from './errors';

/**
 * Answers that Node's HTTP layer would otherwise give itself, bare and without a body, given the
 * contract's problem+json instead: by the server (server.ts) for what never reaches the app, and by
 * the app's first step (requireHost) for the Host header.
 */

/** 400 for an HTTP/1.1 request without Host (RFC 9112 §3.2) or with more than one. */
function hostProblem(req: IncomingMessage): string | undefined {
  let hosts = 0;
  // req.headers keeps only the first Host; rawHeaders has every one, names at even indexes.
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]?.toLowerCase() === 'host') hosts++;
  if (hosts > 1) return 'The request has more than one Host header';
  if (hosts === 0 && req.httpVersion === '1.1') return 'The request has no Host header';
  return undefined;
}

/**
 * The app's first step: Node's own Host check (turned off in server.ts) answers a bare 400 and
 * ignores a second Host; this one answers both as problem+json and closes the connection.
 */
export const requireHost: RequestHandler = (req, res, next) => {
  const problem = hostProblem(req);
  if (problem) writeProblem(res, { status: 400, detail: problem }, { close: true });
  else next();
};

/** Node's parser errors (clientError) by code; anything else it cannot parse is a 400. */
export function clientErrorProblem(code: string | undefined): { status: number; detail: string } {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, detail: 'The request headers are too large' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, detail: 'The request was not received in time' };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { status: 413, detail: 'The chunk extensions are too large' };
    default:
      return { status: 400, detail: 'The request is not valid HTTP' };
  }
}
