import { createHash } from 'node:crypto';
import { MAX_ID } from '../db/limits';

/**
 * A place in the newest-first order: the exact `created_at` (microseconds since the Unix epoch, as
 * PostgreSQL stores it; a JavaScript Date would drop the microseconds) and the id of the last post
 * of a page. It names no list, viewer or search, so a cursor is valid on either list.
 */
export interface Position {
  /** Integer microseconds since 1970-01-01 UTC, in decimal. */
  micros: string;
  id: number;
}

// Layout: version (1 byte), micros (int64), id (uint32), then a checksum of those 13 bytes. The
// checksum catches truncated or altered cursors; it is no secret, and needs none: a forged cursor
// is only another position in a list the caller may read anyway.
const VERSION = 1;
const BODY_BYTES = 13;
const CHECK_BYTES = 4;
const BYTES = BODY_BYTES + CHECK_BYTES;

/**
 * The longest cursor the API accepts (docs/api.md: at most 64 characters): above the 23 of BYTES in
 * base64url, so nothing long is ever decoded, with room for a later layout.
 */
export const CURSOR_MAX_LENGTH = 64;

const checksum = (body: Buffer): Buffer =>
  createHash('sha256').update(body).digest().subarray(0, CHECK_BYTES);

export function encodeCursor(position: Position): string {
  const body = Buffer.alloc(BODY_BYTES);
  body.writeUInt8(VERSION, 0);
  body.writeBigInt64BE(BigInt(position.micros), 1);
  body.writeUInt32BE(position.id, 9);
  return Buffer.concat([body, checksum(body)]).toString('base64url');
}

/**
 * The position a cursor carries, or undefined for anything encodeCursor did not write: wrong
 * length or alphabet, another version, a bad checksum, or values out of range. The SQL rebuilds the
 * timestamp with float8 arithmetic, exact below 2^53 microseconds (the years 1685 to 2255).
 */
export function decodeCursor(cursor: string): Position | undefined {
  if (cursor.length > CURSOR_MAX_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  const bytes = Buffer.from(cursor, 'base64url');
  // Only the one canonical spelling (the last character's spare bits zero) is a cursor.
  if (bytes.length !== BYTES || bytes.toString('base64url') !== cursor) return undefined;
  const body = bytes.subarray(0, BODY_BYTES);
  if (!checksum(body).equals(bytes.subarray(BODY_BYTES)) || body.readUInt8(0) !== VERSION) return undefined;
  const micros = body.readBigInt64BE(1);
  const id = body.readUInt32BE(9);
  const safe = BigInt(Number.MAX_SAFE_INTEGER);
  if (micros > safe || micros < -safe || id < 1 || id > MAX_ID) return undefined;
  return { micros: micros.toString(), id };
}
