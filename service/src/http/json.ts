import type { Response } from 'express';
import etag from 'etag';

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * Sends `body` as JSON: the same status, headers (in the same order) and bytes as Express's
 * `res.json` with the app's default weak ETag, including 304 to a matching `If-None-Match` and no
 * body to HEAD. Unlike `res.json` it neither looks the type up and parses it back nor copies the
 * text into a Buffer to hash it (the `etag` package hashes a string's UTF-8 bytes alike), so the
 * headers and body leave in one chunk. Freshness is Express's own `req.fresh`; the status is the
 * one set before (`res.status`).
 */
export function sendJson(res: Response, body: unknown): void {
  const { req } = res;
  const text = JSON.stringify(body);
  res.setHeader('Content-Type', JSON_TYPE);
  res.setHeader('Content-Length', String(Buffer.byteLength(text)));
  res.setHeader('ETag', jsonTag(text));
  if (req.fresh) {
    res.statusCode = 304;
    res.removeHeader('Content-Type');
    res.removeHeader('Content-Length');
    res.end();
    return;
  }
  if (req.method === 'HEAD') res.end();
  // Node joins a string body to the headers, a copy of the whole answer, and copies it once more
  // for the socket; a large answer goes as bytes, which the socket takes as they are.
  else res.end(text.length > COPY_FREE_CHARS ? Buffer.from(text) : text);
}

/** Above this many characters an answer is sent as bytes (a page of 100 posts is up to ~6 MB). */
const COPY_FREE_CHARS = 64 * 1024;

/**
 * The ETag of a JSON answer whose text is `text`, as sendJson sends it: PUT and DELETE compare a
 * client's If-Match with the tag of the answer GET would give.
 */
export const jsonTag = (text: string): string => etag(text, { weak: true });
