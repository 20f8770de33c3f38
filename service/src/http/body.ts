import { isUtf8 } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import { parse as parseContentType } from 'content-type';
import express, { type Request, type RequestHandler } from 'express';
import { ApiError } from './errors';

/** Every body the service reads is at most this many bytes, after any Content-Encoding is undone. */
const BODY_LIMIT_BYTES = 100 * 1024;

/** The limit as people read it: in the 413 detail and in the OpenAPI document. */
export const BODY_LIMIT_TEXT = `${BODY_LIMIT_BYTES / 1024} kB`;

/** The 413 detail, whether the declared length or the bytes read went over the limit. */
export const BODY_TOO_LARGE = `The request body is larger than ${BODY_LIMIT_TEXT}`;

/**
 * The content codings a body may carry: one of these or none. Stacked codings (`gzip, gzip`),
 * zstd (which only some Node releases can undo) and anything unknown are 415, the same on every
 * runtime.
 */
const CODINGS = new Set(['identity', 'gzip', 'deflate', 'br']);

const JSON_TYPE = 'application/json';
const FORM_TYPE = 'application/x-www-form-urlencoded';

/** Requests whose `Expect: 100-continue` the server left for the body parsing to answer. */
const awaitingContinue = new WeakSet<IncomingMessage>();

/**
 * Called by the server for `Expect: 100-continue`: the 100 is sent only once a body parser is
 * about to read the body, so a request refused first (401, 413, 415, 404...) never gets one.
 */
export function deferContinue(req: IncomingMessage): void {
  awaitingContinue.add(req);
}

/** The declared Content-Length, when there is a valid one. */
function declaredLength(req: IncomingMessage): number | undefined {
  const header = req.headers['content-length'];
  return header !== undefined && /^[0-9]+$/.test(header) ? Number(header) : undefined;
}

const declaresTooMuch = (req: IncomingMessage): boolean => (declaredLength(req) ?? 0) > BODY_LIMIT_BYTES;

/**
 * A body declared over the limit is never read, whatever answers the request (413 from a parser,
 * 401 before it, or a route that reads no body): the connection closes after the answer instead
 * of Node draining, for as long as the client cares to send, a body nobody will look at.
 */
export const closeAfterOversizedBody: RequestHandler = (req, res, next) => {
  if (declaresTooMuch(req)) res.setHeader('Connection', 'close');
  next();
};

const tooLarge = (): ApiError =>
  // The body is never read: closing is the only way to be rid of it without reading it.
  new ApiError(413, BODY_TOO_LARGE, {}, { Connection: 'close' });

/** The type of the error refusing a body that is not UTF-8 (body-parser keeps a thrown error's type). */
const INVALID_UTF8 = 'entity.utf8.invalid';

/**
 * body-parser decodes leniently: an invalid byte becomes U+FFFD and would be stored as if sent.
 * The bytes, once any Content-Encoding is undone, are checked before the JSON or form is parsed.
 */
function requireUtf8(_req: IncomingMessage, _res: unknown, bytes: Buffer): void {
  if (!isUtf8(bytes)) throw Object.assign(new Error('the body is not UTF-8'), { type: INVALID_UTF8 });
}

// body-parser tags its errors with a `type`; each is mapped on its own so that no foreign
// error's status is trusted blindly (an unknown type stays an error: 500).
const PARSER_ERRORS: Record<string, ApiError> = {
  'entity.parse.failed': new ApiError(400, 'The request body is not valid JSON'),
  'entity.too.large': new ApiError(413, BODY_TOO_LARGE),
  'parameters.too.many': new ApiError(413, 'The form has too many fields'),
  'encoding.unsupported': new ApiError(415, 'The request body has an unsupported Content-Encoding'),
  'charset.unsupported': new ApiError(415, 'The request body has an unsupported charset; use utf-8'),
  'request.aborted': new ApiError(400, 'The request body was not received completely'),
  'request.size.invalid': new ApiError(400, 'The request body does not match its Content-Length'),
  [INVALID_UTF8]: new ApiError(400, 'The request body is not valid UTF-8'),
};

const mediaType = (req: Request): string => parseContentType(req.headers['content-type'] ?? '').type;

/**
 * What every body parser checks before it reads a byte: the declared length against the limit,
 * then, for a body of the type it reads, the charset (UTF-8 only: RFC 8259 for JSON, and the form
 * is read as UTF-8 too) and the Content-Encoding. Only then is a deferred 100 Continue sent.
 */
function bodyGuard(type: string): RequestHandler {
  return (req, res, next) => {
    if (declaresTooMuch(req)) throw tooLarge();
    if (!hasBody(req)) {
      next();
      return;
    }
    const header = req.headers['content-type'] ?? '';
    const contentType = parseContentType(header);
    if (contentType.type !== type) {
      next();
      return;
    }
    const charset = contentType.parameters.charset;
    // A second charset could be read differently by whatever sits in front; refuse the ambiguity.
    if (
      (header.match(/;\s*charset\s*=/gi) ?? []).length > 1 ||
      (charset !== undefined && charset.toLowerCase() !== 'utf-8')
    )
      throw new ApiError(415, `The request body must be ${type} in UTF-8 (charset=utf-8 or none)`);
    const coding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase() || 'identity';
    if (!CODINGS.has(coding))
      throw new ApiError(
        415,
        'The request body has an unsupported Content-Encoding; use gzip, deflate, br or none (one at most)',
      );
    if (awaitingContinue.has(req)) res.writeContinue();
    next();
  };
}

/**
 * A parser's errors as problems: those body-parser types (PARSER_ERRORS), and a body that does
 * not decompress, which body-parser marks as a bare 400 with zlib's message, gets a detail of its own.
 */
function decoding(parser: RequestHandler): RequestHandler {
  return (req, res, next) => {
    void parser(req, res, (error?: unknown) => {
      if (error === undefined || error === null) {
        next(error);
        return;
      }
      const type = (error as { type?: unknown }).type;
      if (typeof type === 'string') {
        next(PARSER_ERRORS[type] ?? error);
        return;
      }
      const coding = req.headers['content-encoding'];
      next(
        coding && coding.toLowerCase() !== 'identity'
          ? new ApiError(400, `The request body could not be decoded as ${coding.toLowerCase()}`)
          : error,
      );
    });
  };
}

/** A JSON endpoint refuses any other body type up front, instead of reading it as empty. */
const requireJson: RequestHandler = (req, _res, next) => {
  if (req.body === undefined && hasBody(req)) {
    next(new ApiError(415, 'The request body must be application/json'));
    return;
  }
  next();
};

/** The form login reads url-encoded fields only. */
const requireForm: RequestHandler = (req, _res, next) => {
  if (req.body === undefined && hasBody(req)) {
    next(new ApiError(415, 'The request body must be application/x-www-form-urlencoded'));
    return;
  }
  next();
};

/**
 * Body parsing per route, placed after authentication: a request without a valid token is
 * answered 401 before its body is even read. The parsers decide what they read with the same
 * media-type test as bodyGuard, so nothing is parsed that the guard did not check.
 */
export const jsonBody: RequestHandler[] = [
  bodyGuard(JSON_TYPE),
  decoding(
    express.json({
      limit: BODY_LIMIT_BYTES,
      // Any JSON text is parsed: a scalar (`null`, `"x"`) is valid JSON, and validation refuses it (422).
      strict: false,
      type: (req) => mediaType(req as Request) === JSON_TYPE,
      verify: requireUtf8,
    }),
  ),
  requireJson,
];
export const formBody: RequestHandler[] = [
  bodyGuard(FORM_TYPE),
  decoding(
    express.urlencoded({
      extended: false,
      limit: BODY_LIMIT_BYTES,
      parameterLimit: 20,
      type: (req) => mediaType(req as Request) === FORM_TYPE,
      verify: requireUtf8,
    }),
  ),
  requireForm,
];

function hasBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}
