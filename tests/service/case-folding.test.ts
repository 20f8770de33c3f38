import bcrypt from 'bcrypt';
import request from 'supertest';
import { createApp } from '../../service/src/app';
import { migrateToLatest } from '../../service/src/db/migrator';
import { createLogger } from '../../service/src/logger';
import { countOf } from '../../tools/harness/postgres';
import {
  bearer,
  expectProblem,
  logIn,
  migrateFirst,
  newAccount,
  newPost,
  onFresh,
  planOf,
  postsFixture,
  uniqueToken,
  usingPostgres,
} from './helpers';

/**
 * Letter case is folded the same way whatever locale the database was created with: on PostgreSQL
 * each case runs on a database with LC_CTYPE `C` (CloudNativePG's default initdb, where lower()
 * and ILIKE fold ASCII alone) and on one with `C.UTF-8`; on the embedded database, on its own.
 */
const DATABASES: { name: string; ctype?: string }[] = usingPostgres()
  ? [
      { name: 'LC_CTYPE C', ctype: 'C' },
      { name: 'LC_CTYPE C.UTF-8', ctype: 'C.UTF-8' },
    ]
  : [{ name: 'embedded' }];

const PASSWORD = 'correct horse battery';
let serial = 0;
/** An address with the given local part, unique to this run. */
const address = (local: string): string => `${local}.${String(++serial)}.${String(process.pid)}@example.com`;

describe.each(DATABASES)('On a database with $name', ({ ctype }) => {
  const { service: svc } = postsFixture([], {}, { ctype });

  if (ctype === 'C')
    test('the premise: lower() and ILIKE fold only ASCII here', async () => {
      const { rows } = await svc.db.knex.raw<{ rows: { lowered: string; matches: boolean }[] }>(
        "SELECT lower('ÉLAN') AS lowered, 'ÉTÉ' ILIKE 'été' AS matches",
      );
      expect(rows[0]).toEqual({ lowered: 'Élan', matches: false });
    });

  test('When an address is taken in another case of a non-ASCII letter, then registration answers 409 and stores nothing', async () => {
    const email = address('élan');
    await request(svc.app).post('/users/').send({ email, password: PASSWORD }).expect(201);
    const before = await countOf(svc.db.knex, 'users');
    for (const other of [email.replace('é', 'É'), email.toUpperCase()]) {
      const res = await request(svc.app).post('/users/').send({ email: other, password: PASSWORD });
      expect(expectProblem(res, 409).detail).toMatch(/already exists/);
    }
    expect(await countOf(svc.db.knex, 'users')).toEqual(before);
  });

  test('When an account logs in with its address in another case of a non-ASCII letter, then it gets its own token', async () => {
    const email = address('øyvind');
    const account = await newAccount(svc.app, email);
    const token = await logIn(svc.app, email.toUpperCase(), PASSWORD);
    const me = await request(svc.app).get('/posts/').set(bearer(token)).expect(200);
    expect(me.status).toBe(200);
    // The token is the account's: its draft is on the list it sees.
    const draft = await newPost(svc.app, account, { title: uniqueToken('draft'), published: false });
    const list = await request(svc.app)
      .get('/posts/')
      .query({ search: draft.title })
      .set(bearer(token))
      .expect(200);
    expect((list.body as { id: number }[]).map((p) => p.id)).toEqual([draft.id]);
  });

  test('When a search differs from titles only in the case of non-ASCII letters, then it finds every one of them', async () => {
    const account = await newAccount(svc.app, address('author'));
    const token = uniqueToken('w');
    const titles = [`Été ${token}`, `ÉTÉ ${token}`, `un été ${token}`, `ΑΣΤΡΟ ${token}`, `Winter ${token}`];
    const ids = new Map<string, number>();
    for (const title of titles) ids.set(title, (await newPost(svc.app, account, { title })).id);
    const found = async (search: string): Promise<number[]> => {
      const res = await request(svc.app).get('/posts/public').query({ search, limit: 100 }).expect(200);
      return (res.body as { id: number; title: string }[])
        .filter((p) => p.title.endsWith(token))
        .map((p) => p.id)
        .sort((a, b) => a - b);
    };
    const idsOf = (...picked: string[]) => picked.map((t) => ids.get(t) ?? -1).sort((a, b) => a - b);
    const summer = idsOf(`Été ${token}`, `ÉTÉ ${token}`, `un été ${token}`);
    expect(await found('été')).toEqual(summer);
    expect(await found('ÉTÉ')).toEqual(summer);
    expect(await found(`été ${token}`)).toEqual(summer);
    // A final sigma in the term still finds the letter inside a word.
    expect(await found('ας')).toEqual(idsOf(`ΑΣΤΡΟ ${token}`));
  });

  test('When the search runs, then it is served by the trigram index on the folded title', async () => {
    await svc.db.knex.transaction(async (trx) => {
      await trx.raw('SET LOCAL enable_seqscan = off');
      const plan = await planOf(
        trx,
        "SELECT id FROM posts WHERE fold_case(title) LIKE fold_case('%Needle%')",
      );
      expect(plan).toContain('posts_title_folded_trgm');
    });
  });
});

const logger = createLogger('silent');

describe.each(DATABASES)('Migrating a database with $name', ({ ctype }) => {
  // A new database of its own, migrated in two steps: the embedded one starts from initdb.
  test('When accounts made before the folded index differ only in letter case, then none is lost: the later ones are marked, each logs in with its address as stored, and a new look-alike is refused', async () => {
    await onFresh(
      {},
      async (db, _another, settings) => {
        // The schema before case folding: the first six migrations.
        await migrateFirst(db, 6);
        // The final sigma is kept by lower() on every locale, so these two pass the old index anywhere;
        // É and é only where lower() folds ASCII alone.
        const sigma = address('σας');
        const groups = [[sigma, sigma.replace('σας', 'σασ')]];
        if (ctype === 'C') {
          const elan = address('élan');
          groups.push([elan, elan.replace('é', 'É')]);
        }
        const hash = await bcrypt.hash(PASSWORD, 4);
        const ids: number[][] = [];
        for (const group of groups) {
          const rows = await db
            .knex('users')
            .insert(group.map((email) => ({ email, password: hash })))
            .returning<{ id: number }[]>('id');
          ids.push(rows.map((r) => r.id));
        }
        const plain = address('plain');
        await db.knex('users').insert({ email: plain, password: hash });

        await migrateToLatest(db, logger);

        const marked = await db
          .knex('users')
          .where('email_lookalike', true)
          .orderBy('id')
          .pluck<number[]>('id');
        expect(marked).toEqual(ids.map((group) => group[1]));

        const app = createApp({ db, settings, logger });
        for (const [g, group] of groups.entries())
          for (const [i, email] of group.entries()) {
            const token = await logIn(app, email, PASSWORD);
            const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as {
              sub: unknown;
            };
            expect(String(payload.sub)).toBe(String(ids[g]?.[i]));
          }
        const res = await request(app)
          .post('/users/')
          .send({ email: sigma.replace('σας', 'ΣΑΣ'), password: PASSWORD });
        expectProblem(res, 409);
        const unmarked = await db.knex('users').where({ email: plain }).first<{ email_lookalike: null }>();
        expect(unmarked.email_lookalike).toBeNull();
      },
      { ctype },
    );
  }, 120_000);
});
