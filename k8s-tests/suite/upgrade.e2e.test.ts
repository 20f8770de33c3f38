/**
 * The upgrade case: the local runner starts the replicas from the previous release's image
 * (K8S_UPGRADE_FROM) on an empty database, so the schema is that release's; this case writes posts
 * and votes through the proxy, then has the Deployment's image changed to this release's
 * (K8S_UPGRADE_TO) and rolled out replica by replica (maxSurge 1, maxUnavailable 0) while two
 * clients send reads, signed-in lists and votes back to back. No request may fail; afterwards every
 * replica runs this release with all its migrations applied, what was written before reads back
 * with its votes, and the vote-count backfill has finished. It runs first (k8s-tests/sequencer.js),
 * so the other cases meet this release on an upgraded database. Its requests come from their own
 * client address, so the rate-limit counter case 2 starts from stays untouched. Skipped when the
 * replicas did not start from the previous release (kind, --processes, --no-upgrade).
 */
import { sample } from '../../tools/harness/metrics-text';
import { pollUntil } from '../../tools/harness/poll';
import { writeReport } from '../report';
import {
  closeConnections,
  fromAddress,
  postJson,
  run,
  send,
  signedIn,
  describeAnswer,
  type Answer,
} from './client';
import { driverFromEnv, type ReplicaMetrics } from './drivers';

const driver = driverFromEnv();
const from = process.env.K8S_UPGRADE_FROM;
const to = process.env.K8S_UPGRADE_TO;
const upgradeCase = from && to && driver.upgrade && driver.replicaMetrics ? test : test.skip;

/** Another loopback address than the other cases': the proxy's rate limit counts per client address. */
const CLIENT_ADDRESS = '127.0.0.2';
/** Bound for the backfill to finish on every replica after the rollout. */
const BACKFILL_MS = 60_000;
const MAX_REQUESTS = 20_000;

afterAll(() => {
  closeConnections();
});

const options = fromAddress(CLIENT_ADDRESS);

const body = (answer: Answer): unknown => JSON.parse(answer.body) as unknown;

/** Registers and signs in a user through the proxy; its token. */
const user = (label: string) => signedIn(`e2e-upgrade-${label}-${run}@example.com`, options());

async function newPost(token: string, title: string): Promise<number> {
  const answer = await postJson(
    '/posts/',
    { title, content: `written before the upgrade, ${run}` },
    options(token),
  );
  expect({ title, status: answer.status }).toEqual({ title, status: 201 });
  return (body(answer) as { id: number }).id;
}

async function vote(token: string, postId: number, dir: 0 | 1): Promise<Answer> {
  return postJson('/votes/', { post_id: postId, dir }, options(token));
}

/** Every ready replica's metrics, each page read; fails on a page that did not answer 200. */
async function replicaPages(): Promise<ReplicaMetrics[]> {
  const pages = await (driver.replicaMetrics?.() ?? Promise.resolve([]));
  for (const page of pages)
    expect({ replica: page.name, status: page.status }).toEqual({ replica: page.name, status: 200 });
  return pages;
}

/** Every ready replica's page, once there are some and each meets `done` (or BACKFILL_MS passes). */
const replicasWhen = (done: (page: ReplicaMetrics) => boolean) =>
  pollUntil(replicaPages, (pages) => pages.length > 0 && pages.every(done), {
    withinMs: BACKFILL_MS,
    everyMs: 500,
  });

const applied = (page: ReplicaMetrics) => sample(page.metrics, 'db_migrations_applied');
const backfillPending = (page: ReplicaMetrics) =>
  sample(page.metrics, 'db_backfill_pending', 'backfill="posts.vote_count"');

/** What a stream of requests met while a rollout ran. */
interface Stream {
  sent: number;
  byRequest: Record<string, number>;
  failures: string[];
  failedBy: Record<string, number>;
  /** Whether each client's post holds its vote at the end. */
  voted: boolean[];
}

/**
 * Two clients, one request at a time each, each on a new connection (k8s-tests/README.md,
 * Endpoints: nginx reloads), sending reads, signed-in lists and votes back to back until the
 * rollout has finished. Each client votes on a post of its own, alternating add and withdraw.
 */
async function streamDuring(
  rollout: Promise<unknown>,
  clients: { token: string; postId: number }[],
): Promise<Stream> {
  let done = false;
  const finished = rollout.finally(() => {
    done = true;
  });
  const stream: Stream = { sent: 0, byRequest: {}, failures: [], failedBy: {}, voted: [] };
  const client = async (token: string, postId: number) => {
    let voted = false;
    for (let i = 0; !done && stream.sent < MAX_REQUESTS; i++) {
      stream.sent++;
      const kind = ['public list', 'signed-in page', 'vote', 'signed-in list'][i % 4] ?? '';
      stream.byRequest[kind] = (stream.byRequest[kind] ?? 0) + 1;
      let answer: Answer;
      let expected = 200;
      if (kind === 'public list') answer = await send('GET', '/posts/public', options(token));
      else if (kind === 'signed-in page') answer = await send('GET', '/posts/?limit=1', options(token));
      else if (kind === 'signed-in list') answer = await send('GET', '/posts/?limit=20', options(token));
      else {
        answer = await vote(token, postId, voted ? 0 : 1);
        expected = 201;
        if (answer.status === expected) voted = !voted;
      }
      if (answer.status !== expected) {
        stream.failures.push(`${kind}: ${describeAnswer(answer)}`);
        const key = `${kind} ${answer.error ? 'no answer' : String(answer.status)}`;
        stream.failedBy[key] = (stream.failedBy[key] ?? 0) + 1;
      }
    }
    return voted;
  };
  const [voted] = await Promise.all([
    Promise.all(clients.map(({ token, postId }) => client(token, postId))),
    finished,
  ]);
  stream.voted = voted;
  return stream;
}

/** Each post's votes, read on its own as `token`'s user. */
async function votesOf(token: string, ids: number[]): Promise<Record<number, number>> {
  const read: Record<number, number> = {};
  for (const id of ids) {
    const answer = await send('GET', `/posts/${id}`, options(token));
    expect({ id, status: answer.status }).toEqual({ id, status: 200 });
    read[id] = (body(answer) as { votes: number }).votes;
  }
  return read;
}

/**
 * Data written on the previous release: two users, five posts, votes from both, and a post for
 * each client of the stream to vote on. Returns the users' tokens, each post's expected votes and
 * the stream's posts.
 */
async function writtenOnThePrevious() {
  const a = await user('a');
  const b = await user('b');
  const posts = [
    await newPost(a, 'upgrade a1'),
    await newPost(a, 'upgrade a2'),
    await newPost(a, 'upgrade a3'),
    await newPost(b, 'upgrade b1'),
    await newPost(b, 'upgrade b2'),
  ];
  const voters: Record<number, string[]> = {};
  const cast = async (who: 'a' | 'b', postId: number) => {
    const answer = await vote(who === 'a' ? a : b, postId, 1);
    expect({ who, postId, status: answer.status }).toEqual({ who, postId, status: 201 });
    (voters[postId] ??= []).push(who);
  };
  for (const postId of [posts[0], posts[1], posts[3]]) await cast('a', postId ?? 0);
  for (const postId of [posts[0], posts[2], posts[3], posts[4]]) await cast('b', postId ?? 0);
  const expectedVotes = new Map(posts.map((id) => [id, voters[id]?.length ?? 0]));
  // Each client of the stream votes on a post of its own: its votes alternate add and withdraw.
  const streamPosts = { a: await newPost(a, 'upgrade stream a'), b: await newPost(b, 'upgrade stream b') };
  return { a, b, expectedVotes, streamPosts };
}

/** Every replica on this release, its migrations applied and the backfill done (it runs in the background). */
async function upgradedReplicas(migrationsBefore: number[]) {
  const after = await replicasWhen((page) => page.image === to && backfillPending(page) === 0);
  const pages = after.value;
  expect(pages.map((p) => ({ image: p.image, backfillPending: backfillPending(p) }))).toEqual(
    pages.map(() => ({ image: to, backfillPending: 0 })),
  );
  for (const page of pages) {
    expect(sample(page.metrics, 'db_schema_up_to_date')).toBe(1);
    expect(applied(page)).toBe(sample(page.metrics, 'db_migrations_known'));
    // Every migration the previous release had stays applied (a release may add none).
    expect(applied(page)).toBeGreaterThanOrEqual(Math.max(...migrationsBefore));
  }
  return { after, pages };
}

upgradeCase(
  'When the previous release is replaced by this one replica by replica under a steady stream of reads, lists and votes, then none fails and the data, its votes and the schema are upgraded (case U)',
  async () => {
    const upgrade = driver.upgrade;
    if (!upgrade || !from || !to) throw new Error('no upgrade');
    // The previous release serves, on its own schema.
    const before = await replicaPages();
    expect(before.length).toBeGreaterThan(0);
    expect(before.map((p) => p.image)).toEqual(before.map(() => from));
    for (const page of before) expect(sample(page.metrics, 'db_schema_up_to_date')).toBe(1);
    const migrationsBefore = before.map((page) => applied(page) ?? -1);

    const { a, b, expectedVotes, streamPosts } = await writtenOnThePrevious();

    const startedAt = Date.now();
    let detail = '';
    const stream = await streamDuring(
      upgrade().then(({ replaced }) => {
        detail = replaced;
      }),
      [
        { token: a, postId: streamPosts.a },
        { token: b, postId: streamPosts.b },
      ],
    );
    const { sent, failures, failedBy, byRequest } = stream;
    const [votedA, votedB] = stream.voted;
    const upgradeMs = Date.now() - startedAt;
    expectedVotes.set(streamPosts.a, votedA ? 1 : 0);
    expectedVotes.set(streamPosts.b, votedB ? 1 : 0);

    const { after, pages } = await upgradedReplicas(migrationsBefore);

    // What was written before the upgrade, and the stream's votes, read back as written: each post
    // on its own and in the signed-in list (the vote counts come from the backfilled column now).
    const read = await votesOf(a, [...expectedVotes.keys()]);
    const list = await send('GET', '/posts/?limit=100', options(a));
    expect(list.status).toBe(200);
    const listed = Object.fromEntries(
      (body(list) as { id: number; votes: number }[])
        .filter((post) => expectedVotes.has(post.id))
        .map((post) => [post.id, post.votes]),
    );
    const expected = Object.fromEntries(expectedVotes);
    expect(read).toEqual(expected);
    expect(listed).toEqual(expected);

    writeReport('upgrade', {
      from,
      to,
      posts: expectedVotes.size,
      votes: [...expectedVotes.values()].reduce((sum, n) => sum + n, 0),
      migrationsBefore,
      migrationsAfter: pages.map((page) => applied(page) ?? -1),
      sent,
      failed: failures.length,
      failedBy,
      byRequest,
      detail,
      upgradeMs,
      backfillDoneMs: after.ms,
    });
    expect(failures.slice(0, 10)).toEqual([]);
    expect(sent).toBeGreaterThan(10);
  },
  600_000,
);

const rollbackCase = upgradeCase === test && driver.rollback ? test : test.skip;

rollbackCase(
  'When this release is rolled back to the previous one replica by replica under the same stream (helm rollback), then none fails, what was written on this release reads back on the previous one, and rolling forward again leaves every replica on this release (case R)',
  async () => {
    const { upgrade, rollback } = driver;
    if (!upgrade || !rollback || !from || !to) throw new Error('no rollback');
    const onImage = (image: string) => replicasWhen((page) => page.image === image);
    expect((await onImage(to)).held).toBe(true);

    // Written on this release: a post with a vote, and a post of its own for each client's stream.
    const a = await user('rollback-a');
    const b = await user('rollback-b');
    const written = await newPost(a, 'rollback a1');
    expect((await vote(b, written, 1)).status).toBe(201);
    const streamPosts = {
      a: await newPost(a, 'rollback stream a'),
      b: await newPost(b, 'rollback stream b'),
    };

    const stream = await streamDuring(rollback(), [
      { token: a, postId: streamPosts.a },
      { token: b, postId: streamPosts.b },
    ]);
    const back = await onImage(from);
    expect(back.value.map((page) => page.image)).toEqual(back.value.map(() => from));

    // The previous release reads what this one wrote, on the schema this one migrated.
    const expected = {
      [written]: 1,
      [streamPosts.a]: stream.voted[0] ? 1 : 0,
      [streamPosts.b]: stream.voted[1] ? 1 : 0,
    };
    const read = await votesOf(a, [written, streamPosts.a, streamPosts.b]);
    expect(read).toEqual(expected);
    expect(stream.failures.slice(0, 10)).toEqual([]);
    expect(stream.sent).toBeGreaterThan(10);

    // Forward again, so that the cases after this one meet this release.
    await upgrade();
    expect((await onImage(to)).held).toBe(true);
  },
  600_000,
);
