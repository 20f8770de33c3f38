/**
 * Writers racing on one post: its conditional DELETE (the post locked, then its votes deleted by
 * the cascade) against the withdrawal of its votes (a vote deleted, then the count's trigger locks
 * the post). PostgreSQL breaks a deadlock by failing one side; the service tries it again within
 * the request's budget, and never answers 500.
 */
import request from 'supertest';
import { countOf } from '../../tools/harness/postgres';
import { bearer, expectProblem, newPost, postsFixture, testOnPostgres, type Account, vote } from './helpers';

const ROUNDS = 150;

const { service, owner, v1, v2, v3 } = postsFixture(['owner', 'v1', 'v2', 'v3']);
const voters = (): Account[] => [v1, v2, v3];

testOnPostgres(
  `When a post's conditional DELETE races the withdrawal of its votes, ${ROUNDS} times, then no answer is a 500, each says what the database holds, and a 503 is a problem with Retry-After`,
  async () => {
    const api = () => request(service.app);
    const statuses: Record<string, number> = {};
    const count = (what: string, status: number) => {
      statuses[`${what} ${status}`] = (statuses[`${what} ${status}`] ?? 0) + 1;
    };
    for (let round = 0; round < ROUNDS; round++) {
      const post = await newPost(service.app, owner);
      for (const voter of voters()) await vote(service.app, voter, post.id, 1).expect(201);
      const etag = (await api().get(`/posts/${post.id}`).set(bearer(owner)).expect(200)).headers
        .etag as string;

      const [deleted, ...withdrawn] = await Promise.all([
        api().delete(`/posts/${post.id}`).set(bearer(owner)).set('If-Match', etag),
        ...voters().map((voter) => vote(service.app, voter, post.id, 0)),
      ]);
      count('DELETE', deleted.status);
      // 412: a withdrawal came first and changed the post's votes, so its ETag.
      expect([204, 412, 503]).toContain(deleted.status);
      if (deleted.status !== 204) expectProblem(deleted, deleted.status);
      if (deleted.status === 503) {
        expect(deleted.headers['retry-after']).toBe('1');
      }
      for (const answer of withdrawn) {
        count('withdraw', answer.status);
        expect([201, 404, 503]).toContain(answer.status);
        if (answer.status !== 201) expectProblem(answer, answer.status);
      }
      const left = await service.db.knex('posts').where({ id: post.id }).select('id');
      expect(left.length).toBe(deleted.status === 204 ? 0 : 1);
      if (deleted.status !== 204) {
        // What the answers acknowledged is what the count holds.
        const votes = await countOf(service.db.knex, 'votes WHERE post_id = ?', [post.id]);
        const stayed = withdrawn.filter((answer) => answer.status !== 201).length;
        expect(votes).toBe(stayed);
      }
    }
    console.log(JSON.stringify(statuses));
  },
  180_000,
);
