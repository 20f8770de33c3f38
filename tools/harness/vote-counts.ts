/**
 * What a post's vote count must equal: its rows in `votes`. The upgrade and backup drills hold the
 * stored count (post_vote_counts) and the count the API shows against them.
 */
import { call } from './client';

/** A post's stored count (null: none stored) and its rows in `votes`. */
export interface VoteCount {
  id: number;
  stored: number | null;
  rows: number;
}

/** Each post's VoteCount; a WHERE on `p` (posts), `s` (the stored count) and `c.n` (the rows) picks them. */
export const VOTE_COUNTS = `SELECT p.id, s.votes AS stored, coalesce(c.n, 0)::int AS rows
  FROM posts p LEFT JOIN post_vote_counts s ON s.post_id = p.id
  LEFT JOIN (SELECT post_id, count(*)::int AS n FROM votes GROUP BY post_id) c ON c.post_id = p.id`;

/** The votes each post shows its reader `token(id)` through the API at `base` (`status N` when not 200), eight at a time. */
export async function shownVotes(
  base: string,
  ids: readonly number[],
  token: (id: number) => string,
): Promise<Map<number, number | string>> {
  const shown = new Map<number, number | string>();
  for (let i = 0; i < ids.length; i += 8)
    await Promise.all(
      ids.slice(i, i + 8).map(async (id) => {
        const answer = await call(base, `/posts/${String(id)}`, { token: token(id) });
        shown.set(
          id,
          answer.status === 200 ? (answer.body as { votes: number }).votes : `status ${answer.status}`,
        );
      }),
    );
  return shown;
}
