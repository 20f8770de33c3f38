import type { IncomingMessage } from 'node:http';
import { ApiError } from './errors';
import { jsonTag } from './json';

/** An If-Match condition: any current representation (`*`), or one of these entity-tags. */
export type IfMatch = { any: true } | { any: false; tags: string[] };

/** One entity-tag (RFC 9110 §8.8.3), weak or strong, then a comma or the end. */
const ENTITY_TAG = /\s*((?:W\/)?"[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)/y;

/**
 * The request's If-Match, or undefined when it has none. A value that is neither `*` nor a list of
 * entity-tags matches nothing: the client asked for a condition, and one that cannot be read
 * cannot be confirmed.
 */
export function ifMatch(req: IncomingMessage): IfMatch | undefined {
  const value = req.headers['if-match'];
  if (value === undefined) return undefined;
  if (value.trim() === '*') return { any: true };
  const tags: string[] = [];
  ENTITY_TAG.lastIndex = 0;
  while (ENTITY_TAG.lastIndex < value.length) {
    const at = ENTITY_TAG.lastIndex;
    const match = ENTITY_TAG.exec(value);
    if (!match || ENTITY_TAG.lastIndex === at) return { any: false, tags: [] };
    tags.push(match[1] ?? '');
  }
  return { any: false, tags };
}

/** The opaque part of a tag: every ETag the service sends is weak (W/), and is compared without it. */
const opaque = (tag: string): string => (tag.startsWith('W/') ? tag.slice(2) : tag);

/**
 * Whether `body`, the JSON a GET of the resource answers now, satisfies the condition. The
 * service's tags are weak (the JSON's hash), so the weak comparison of RFC 9110 §8.8.3.2 is the one
 * that can match them: `W/"…"` and `"…"` name the same tag.
 */
export function conditionHolds(condition: IfMatch, body: unknown): boolean {
  if (condition.any) return true;
  const current = opaque(jsonTag(JSON.stringify(body)));
  return condition.tags.some((tag) => opaque(tag) === current);
}

export const preconditionFailed = (): ApiError =>
  new ApiError(
    412,
    "The post has changed since the ETag given in If-Match: read it again (GET) and use that answer's ETag",
  );
