/**
 * Reads on standbys (DB_READ_HOSTNAME): the settings' rules, and the routing seen from one process.
 * A real standby, lagging or lost, is the reliability suite's (tests/reliability/standby-reads.test.ts);
 * here the read endpoint is the test's PostgreSQL itself (a primary passes the replay check) or a
 * port nothing listens on.
 */
import request from 'supertest';
import { PrimaryPositions, parseLsn } from '../../service/src/db/standbys';
import { loadSettings } from '../../service/src/settings';
import { pollUntil } from '../../tools/harness/poll';
import { Relay } from '../../tools/harness/relay';
import { freePort } from '../../tools/harness/service';
import {
  bearer,
  databaseSnapshot,
  describeOnPostgres,
  expectProblem,
  fixture,
  newAccount,
  newPost,
  postgresConnection,
  postsFixture,
  startTestService,
  testEnv,
  type TestService,
} from './helpers';

const POSTGRES = { DB_HOSTNAME: 'db.example.internal' };

describe('Settings of reads on standbys', () => {
  test('When none is set, then there are no standbys, and the port, pool and lag bound take their defaults', () => {
    const { db } = loadSettings(testEnv({ ...POSTGRES, DB_PORT: '6543', DB_POOL_MAX: '7' }));
    expect(db.readHosts).toEqual([]);
    expect(db.readPort).toBe(6543);
    expect(db.readPoolMax).toBe(7);
    expect(db.readMaxLagMs).toBe(1000);
  });

  test('When DB_READ_HOSTNAME lists hosts with and without a port, then each without takes DB_READ_PORT', () => {
    const { db } = loadSettings(
      testEnv({
        ...POSTGRES,
        DB_READ_HOSTNAME: 'pg-ro.example.internal, 10.0.0.7:6433',
        DB_READ_PORT: '5433',
        DB_READ_POOL_MAX: '3',
        DB_READ_MAX_LAG_MS: '250',
      }),
    );
    expect(db.readHosts).toEqual([
      { host: 'pg-ro.example.internal', port: 5433 },
      { host: '10.0.0.7', port: 6433 },
    ]);
    expect(db.readPoolMax).toBe(3);
    expect(db.readMaxLagMs).toBe(250);
  });

  test.each([
    [{ DB_READ_HOSTNAME: 'a.example,,b.example' }, 'DB_READ_HOSTNAME: has an empty entry 2 of 3'],
    [{ DB_READ_HOSTNAME: 'not a host' }, 'DB_READ_HOSTNAME: has entry 1 of 1 "not a host"'],
    [
      { DB_READ_HOSTNAME: 'ro.example:70000' },
      'DB_READ_HOSTNAME: has entry 1 of 1 "ro.example:70000", whose port is not 1 to 65535',
    ],
    [
      { DB_READ_HOSTNAME: 'ro.example:0' },
      'DB_READ_HOSTNAME: has entry 1 of 1 "ro.example:0", whose port is not 1 to 65535',
    ],
    [
      { DB_READ_HOSTNAME: 'ro.example:5433,ro.example:5433' },
      'DB_READ_HOSTNAME: has "ro.example:5433" twice',
    ],
    [{ DB_READ_PORT: 'five' }, 'DB_READ_PORT: DB_READ_PORT must be a number'],
    [{ DB_READ_POOL_MAX: '0' }, 'DB_READ_POOL_MAX: DB_READ_POOL_MAX must be greater than or equal to 1'],
    [
      { DB_READ_MAX_LAG_MS: '50' },
      'DB_READ_MAX_LAG_MS: DB_READ_MAX_LAG_MS must be greater than or equal to 100',
    ],
  ])('When the environment has %j, then loading stops naming it', (env, message) => {
    expect(() => loadSettings(testEnv({ ...POSTGRES, ...env }))).toThrow(`Invalid setting ${message}`);
  });

  test('When DB_READ_HOSTNAME is set without DB_HOSTNAME, then loading stops: the embedded database has no standbys', () => {
    expect(() => loadSettings(testEnv({ DB_HOSTNAME: '', DB_READ_HOSTNAME: 'ro.example' }))).toThrow(
      'Invalid setting DB_READ_HOSTNAME: it needs DB_HOSTNAME (a PostgreSQL primary)',
    );
  });
});

describe("The primary's positions", () => {
  test('When positions were seen over time, then a read needs the lowest one seen within the bound, and lag counts from when the primary first had more', () => {
    const positions = new PrimaryPositions();
    positions.record(parseLsn('0/100'), 0);
    positions.record(parseLsn('0/100'), 400);
    positions.record(parseLsn('0/200'), 500);
    positions.record(parseLsn('1/0'), 900);
    // Within 1 s of 1200: the position seen at 400 still counts.
    expect(positions.required(1200, 1000)).toBe(parseLsn('0/100'));
    // Within 1 s of 1450: only what was seen from 500 on.
    expect(positions.required(1450, 1000)).toBe(parseLsn('0/200'));
    expect(positions.lagMs(parseLsn('0/100'), 1450)).toBe(950);
    expect(positions.lagMs(parseLsn('1/0'), 1450)).toBe(0);
    // Nothing seen within the bound and the primary not known to be unreachable: no position.
    expect(positions.required(5000, 1000)).toBeUndefined();
    positions.unreachable = true;
    expect(positions.required(5000, 1000)).toBe(parseLsn('1/0'));
  });

  test('When the reads of the position fail, then the last one seen counts as lost only once nothing was seen within the bound', () => {
    const positions = new PrimaryPositions();
    positions.record(parseLsn('0/100'), 0);
    positions.unreachable = true;
    // Seen within the bound: that position holds every write acknowledged before the bound.
    expect(positions.lost(900, 1000)).toBe(false);
    // Past it: writes acknowledged since may be missing from it, so the standby must vouch for itself.
    expect(positions.required(1500, 1000)).toBe(parseLsn('0/100'));
    expect(positions.lost(1500, 1000)).toBe(true);
    positions.unreachable = false;
    expect(positions.lost(1500, 1000)).toBe(false);
  });

  test('When a promoted standby reports a lower position, then the history starts again from it', () => {
    const positions = new PrimaryPositions();
    positions.record(parseLsn('0/900'), 0);
    positions.record(parseLsn('0/800'), 100);
    expect(positions.required(150, 1000)).toBe(parseLsn('0/800'));
  });

  test("When the primary's timeline changes, then the history starts again from its position, even a higher one", () => {
    const positions = new PrimaryPositions();
    positions.record(parseLsn('0/900'), 0, '00000001');
    positions.record(parseLsn('0/A00'), 100, '00000002');
    expect(positions.timeline).toBe('00000002');
    expect(positions.lagMs(parseLsn('0/900'), 150)).toBe(50);
    expect(positions.required(150, 1000)).toBe(parseLsn('0/A00'));
  });
});

describe('Without standbys', () => {
  const { service } = postsFixture();

  test('When the public feed is read anonymously, then it runs on the primary and is counted there', async () => {
    const before = service.db.reads.counts.primary;
    await request(service.app).get('/posts/public').expect(200);
    expect(service.db.reads.counts.primary).toBe(before + 1);
    expect(service.db.reads.counts.standby).toBe(0);
  });
});

describeOnPostgres('With a read endpoint', () => {
  // The test's PostgreSQL as its own read endpoint: not in recovery, it passes every replay check.
  const service = fixture(() => startTestService({ DB_READ_HOSTNAME: process.env.DB_HOSTNAME ?? '' }));
  const leastBudget = fixture(() =>
    startTestService({ DB_READ_HOSTNAME: process.env.DB_HOSTNAME ?? '', DB_STATEMENT_TIMEOUT_MS: '200' }),
  );
  const unreachable = fixture(async () =>
    startTestService({ DB_READ_HOSTNAME: `127.0.0.1:${String(await freePort())}` }),
  );

  /** Reads until one is not sent to the primary for want of its position (read every 0.1 s from the start). */
  const positioned = async (on: TestService): Promise<void> => {
    const read = async () => {
      const before = on.db.reads.counts.fallbacks.no_primary_position;
      await request(on.app).get('/posts/public?limit=1').expect(200);
      return on.db.reads.counts.fallbacks.no_primary_position === before;
    };
    const { held } = await pollUntil(read, (onStandby) => onStandby, { withinMs: 5000 });
    if (!held) throw new Error('no position of the primary within 5 s of reads');
  };

  test('When a post is written, then the anonymous feed read on the standby endpoint has it, in the same order and form as the primary gives', async () => {
    await positioned(service);
    const author = await newAccount(service.app);
    for (const title of ['first', 'second', 'third']) await newPost(service.app, author, { title });
    const counts = { ...service.db.reads.counts };
    const anonymous = await request(service.app).get('/posts/public?limit=3').expect(200);
    expect(service.db.reads.counts.standby).toBe(counts.standby + 1);
    const signedIn = await request(service.app).get('/posts/public?limit=3').set(bearer(author)).expect(200);
    // With a token the read stays on the primary and is not one of the standby-eligible reads.
    expect(service.db.reads.counts.standby).toBe(counts.standby + 1);
    expect((anonymous.body as { title: string }[]).map((p) => p.title)).toEqual(['third', 'second', 'first']);
    expect(anonymous.body).toEqual(signedIn.body);
    expect(anonymous.headers.link).toEqual(signedIn.headers.link);
  });

  test('When DB_STATEMENT_TIMEOUT_MS is its least, then the anonymous feed still reads on the standby endpoint', async () => {
    await positioned(leastBudget);
    const counts = {
      ...leastBudget.db.reads.counts,
      fallbacks: { ...leastBudget.db.reads.counts.fallbacks },
    };
    for (let i = 0; i < 5; i++) await request(leastBudget.app).get('/posts/public?limit=1').expect(200);
    expect(leastBudget.db.reads.counts.standby).toBe(counts.standby + 5);
    expect(leastBudget.db.reads.counts.fallbacks).toEqual(counts.fallbacks);
  });

  test('When a search matches nothing, then the standby endpoint answers an empty page, not a fallback', async () => {
    await positioned(service);
    const counts = { ...service.db.reads.counts, fallbacks: { ...service.db.reads.counts.fallbacks } };
    const res = await request(service.app).get('/posts/public?search=nothing-has-this-title').expect(200);
    expect(res.body).toEqual([]);
    expect(service.db.reads.counts.standby).toBe(counts.standby + 1);
    expect(service.db.reads.counts.fallbacks).toEqual(counts.fallbacks);
  });

  test("When the feed's table is locked past the budget and cancels take a while to arrive, then the read is a 503 and neither its statement on the read endpoint nor the primary's is left waiting on the server", async () => {
    // The read endpoint behind a relay that holds each cancel back, as a network's round trip does.
    const relay = new Relay(Number(process.env.DB_PORT ?? 5432), process.env.DB_HOSTNAME);
    await relay.start();
    relay.delayCancels(100);
    const behindRelay = await startTestService({ DB_READ_HOSTNAME: `127.0.0.1:${String(relay.port)}` });
    const locker = postgresConnection(behindRelay.settings.db.name);
    try {
      await positioned(behindRelay);
      const trx = await locker.transaction();
      try {
        await trx.raw('LOCK TABLE posts IN ACCESS EXCLUSIVE MODE');
        expectProblem(await request(behindRelay.app).get('/posts/public?limit=1'), 503);
        // The endpoint's statement is dropped at once at its share's end: its cancel must still stop it.
        const waiting = await pollUntil(
          async () =>
            (
              await trx.raw<{ rows: unknown[] }>(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'social-posts' AND wait_event_type = 'Lock'",
              )
            ).rows.length,
          (count) => count === 0,
          { withinMs: 2000 },
        );
        expect(waiting.value).toBe(0);
      } finally {
        await trx.rollback();
      }
    } finally {
      await locker.destroy();
      await behindRelay.close();
      await relay.close();
    }
  });

  test('When the read endpoint refuses connections, then the feed answers from the primary and the fallback is counted', async () => {
    await positioned(unreachable);
    const author = await newAccount(unreachable.app);
    await newPost(unreachable.app, author, { title: 'still readable' });
    const errors = unreachable.db.reads.counts.fallbacks.error;
    const res = await request(unreachable.app).get('/posts/public').expect(200);
    expect((res.body as { title: string }[]).map((p) => p.title)).toEqual(['still readable']);
    expect(unreachable.db.reads.counts.standby).toBe(0);
    expect(unreachable.db.reads.counts.fallbacks.error).toBe(errors + 1);
  });

  test.each(['limit=abc', 'skip=-1', 'cursor=%00'])(
    'When the anonymous feed is asked with %s, then it is refused as without standbys, and nothing is read or changed',
    async (query) => {
      const before = await databaseSnapshot(service.db);
      const counts = service.db.reads.counts.standby + service.db.reads.counts.primary;
      expectProblem(await request(service.app).get(`/posts/public?${query}`), 422);
      expect(service.db.reads.counts.standby + service.db.reads.counts.primary).toBe(counts);
      expect(await databaseSnapshot(service.db)).toBe(before);
    },
  );
});
