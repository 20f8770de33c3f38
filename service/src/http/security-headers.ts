import type { RequestHandler } from 'express';
import helmet from 'helmet';

/**
 * The headers every API answer carries (JSON and problem+json): what keeps a browser from using
 * one as anything but data; helmet's others go with the page (/docs) alone (docs/security.md,
 * "Response headers").
 */
const API_HEADERS: [string, string][] = [
  ['Content-Security-Policy', "default-src 'none'; frame-ancestors 'none'"],
  ['Cross-Origin-Resource-Policy', 'same-origin'],
  ['Strict-Transport-Security', 'max-age=31536000; includeSubDomains'],
  ['X-Content-Type-Options', 'nosniff'],
];

export const apiHeaders: RequestHandler = (_req, res, next) => {
  for (const [name, value] of API_HEADERS) res.setHeader(name, value);
  next();
};

/** helmet's full set, for the HTML page of /docs and its assets. */
export const pageHeaders: RequestHandler = helmet();
