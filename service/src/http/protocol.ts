import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { RequestHandler } from 'express';
import { problemBody } from './errors';

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
  if (problem) writeProblem(res, 400, problem);
  else next();
};

/**
 * A problem+json answer on a plain node:http response (no Express in front of it). With `close`
 * the connection ends after it; without, Node reads off any body and keeps the connection.
 */
export function writeProblem(
  res: ServerResponse,
  status: number,
  detail: string,
  { headers = {}, close = true }: { headers?: Record<string, string>; close?: boolean } = {},
): void {
  const body = JSON.stringify(problemBody(status, detail));
  res.writeHead(status, {
    ...headers,
    'Content-Type': 'application/problem+json',
    'Content-Length': Buffer.byteLength(body),
    ...(close ? { Connection: 'close' } : {}),
  });
  res.end(body);
}

/** The same answer written straight onto a socket, for errors raised before a response exists. */
export function rawProblem(status: number, detail: string, headers: Record<string, string> = {}): string {
  const body = JSON.stringify(problemBody(status, detail));
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n${extra}` +
    `Content-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

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
