import type { IncomingMessage } from 'node:http';
import { ApiError } from './errors';
import { jsonTag } from './json';

/** An If-Match condition: any current representation (`*`), or one of these entity-tags. */
export type IfMatch = { any: true } | { any: false; tags: string[] };

/** One entity-tag (RFC 9110 §8.8.3), weak or strong, then a comma or the end. */
const ENTITY_TAG = /\s*((?:W\/)?"[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)/y;

/**
 * A list of entity-tags or `*` as a condition header carries it. A value that is neither matches
 * nothing: the client asked for a condition, and one that cannot be read cannot be confirmed.
 */
function entityTags(value: string): IfMatch {
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

/** The request's If-Match, or undefined when it has none. */
export function ifMatch(req: IncomingMessage): IfMatch | undefined {
  const value = req.headers['if-match'];
  return value === undefined ? undefined : entityTags(value);
}

/** The request's If-None-Match, or undefined when it has none (a change then must not match it). */
export function ifNoneMatch(req: IncomingMessage): IfMatch | undefined {
  const value = req.headers['if-none-match'];
  return value === undefined ? undefined : entityTags(value);
}

/** The opaque part of a tag: every ETag the service sends is weak (W/), and is compared without it. */
const opaque = (tag: string): string => (tag.startsWith('W/') ? tag.slice(2) : tag);

/**
 * Whether `body`, the JSON a GET of the resource answers now, satisfies the condition. The
 * service's tags are weak (the JSON's hash), so the weak comparison of RFC 9110 §8.8.3.2 is the one
 * that can match them: `W/"…"` and `"…"` name the same tag.
 */
function conditionHolds(condition: IfMatch, body: unknown): boolean {
  if (condition.any) return true;
  const current = opaque(jsonTag(JSON.stringify(body)));
  return condition.tags.some((tag) => opaque(tag) === current);
}

/**
 * Whether a change may go ahead on the resource whose GET answers `body` (RFC 9110 §13.2.2): its
 * If-Match names it, and its If-None-Match neither is `*` nor names it. An If-None-Match that
 * cannot be read holds as little as such an If-Match: the client asked not to overwrite something.
 */
export function changeConditionsHold(
  match: IfMatch | undefined,
  noneMatch: IfMatch | undefined,
  body: unknown,
): boolean {
  if (match && !conditionHolds(match, body)) return false;
  if (!noneMatch) return true;
  return !noneMatch.any && noneMatch.tags.length > 0 && !conditionHolds(noneMatch, body);
}

export const preconditionFailed = (): ApiError =>
  new ApiError(
    412,
    "The post is not the one If-Match names, or is one If-None-Match names: read it again (GET) and use that answer's ETag",
  );
