import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { ApiError } from './errors';

/** The longest key taken: room for a UUID or any such token, kept short as each is stored with its post. */
const MAX_KEY_LENGTH = 255;
/** Visible ASCII and space, without the quote, backslash and comma a list or an sf-string would need. */
const KEY = /^[\x20\x21\x23-\x2b\x2d-\x5b\x5d-\x7e]+$/;

const invalidKey = (message: string): ApiError =>
  new ApiError(422, `Invalid header: ${message}`, { errors: [{ field: 'Idempotency-Key', message }] });

/**
 * The request's `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header: an sf-string, so the
 * quotes are taken off; a bare value is taken as it is), or undefined when it has none. A key the
 * service cannot keep as sent, or two of them, is a 422 naming the header.
 */
export function idempotencyKey(req: IncomingMessage): string | undefined {
  const sent = req.headers['idempotency-key'];
  if (sent === undefined) return undefined;
  // Node joins repeated headers it does not know with a comma, which no key holds.
  const trimmed = (Array.isArray(sent) ? sent.join(',') : sent).trim();
  const key = /^".*"$/.test(trimmed) ? trimmed.slice(1, -1) : trimmed;
  if (key.length === 0 || key.length > MAX_KEY_LENGTH || !KEY.test(key))
    throw invalidKey(
      `Idempotency-Key must be one value of 1 to ${String(MAX_KEY_LENGTH)} visible ASCII characters or spaces, without quotes, backslashes or commas inside (a UUID, say)`,
    );
  return key;
}

/** A request's digest: what a retry with the same key must ask again (its validated fields, in order). */
export const requestDigest = (fields: readonly unknown[]): string =>
  createHash('sha256').update(JSON.stringify(fields)).digest('base64url');

/** The same key sent earlier by the same user for a different request. */
export const keyReused = (): ApiError =>
  invalidKey('Idempotency-Key was sent before with a different request: send a new key for a new one');
