import type { RequestHandler } from 'express';
import helmet from 'helmet';

/**
 * The headers every API answer carries (JSON and problem+json): what keeps a browser from using
 * one as anything but data. nosniff: never sniffed into HTML or script. CSP `default-src 'none'`:
 * nothing runs or loads should one be opened as a page, and `frame-ancestors 'none'`: it is never
 * framed. CORP same-origin: no foreign page reads one by a no-cors request (CORS-approved reads
 * are unaffected). HSTS as helmet sends it, for a browser that reaches the API over HTTPS.
 * helmet's other headers (COOP, Origin-Agent-Cluster, X-DNS-Prefetch-Control, X-Download-Options,
 * X-Permitted-Cross-Domain-Policies, Referrer-Policy, X-XSS-Protection, X-Frame-Options) govern
 * documents and what they load: they go with the page (/docs) alone.
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
