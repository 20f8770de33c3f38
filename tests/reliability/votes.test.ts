import {
  account,
  call,
  author,
  countOf,
  report,
  startService,
  countBy,
  type ServiceProcess,
  scratchDatabase,
  vote,
} from './support';

const SIMULTANEOUS = 100;
const ROUNDS = 3;

const database = scratchDatabase('votes');
let svc: ServiceProcess;

beforeAll(async () => {
  svc = await startService({ DB_NAME: database.name });
});

const storedVotes = (postId: number): Promise<number> =>
  countOf(database.db, 'votes WHERE post_id = ?', [postId]);

test('When 100 identical votes and then 100 identical withdrawals arrive at once, then one vote gets 201 and 99 get 409, one withdrawal 201 and 99 404, and the post shows the total that follows', async () => {
  const { posts } = await author(svc.base, 'author@example.com', ROUNDS);
  const voter = await account(svc.base, 'voter@example.com');
  const figures: Record<string, string> = {};

  for (const postId of posts) {
    // All requests are sent before any answer is awaited; fetch opens a connection for each.
    const add = await Promise.all(
      Array.from({ length: SIMULTANEOUS }, () => vote(svc.base, voter, postId, 1)),
    );
    const afterAdd = await storedVotes(postId);
    const shownAfterAdd = (await call(svc.base, `/posts/${String(postId)}`, { token: voter })).body as {
      votes: number;
    };
    const remove = await Promise.all(
      Array.from({ length: SIMULTANEOUS }, () => vote(svc.base, voter, postId, 0)),
    );
    const afterRemove = await storedVotes(postId);
    const added = countBy(add, (a) => a.status);
    const removed = countBy(remove, (a) => a.status);
    figures[`post${String(postId)}`] =
      `add${JSON.stringify(added)}->${String(afterAdd)} remove${JSON.stringify(removed)}->${String(afterRemove)}`;

    expect(added).toEqual({ 201: 1, 409: SIMULTANEOUS - 1 });
    expect(afterAdd).toBe(1);
    expect(shownAfterAdd.votes).toBe(1);
    expect(removed).toEqual({ 201: 1, 404: SIMULTANEOUS - 1 });
    expect(afterRemove).toBe(0);
  }
  report('concurrent votes', figures);
  expect(svc.child.exitCode).toBeNull();
});
