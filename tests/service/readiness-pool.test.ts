/**
 * Readiness asks the database on a connection of its own: a request pool that is full (load) is
 * not a database that has gone, and must not take a healthy replica out of rotation.
 * On the embedded database there is one session, which the probe shares: PostgreSQL only.
 */
import request from 'supertest';
import { countOf } from '../../tools/harness/postgres';
import { postsFixture, testOnPostgres } from './helpers';

const { service } = postsFixture([], { DB_POOL_MAX: '1' });

testOnPostgres(
  'When every connection of the request pool is taken, then readiness still answers 200 within its 1 s',
  async () => {
    // The pool's one connection, held as a long request would hold it.
    const held = await service.db.knex.transaction();
    let ready: request.Response;
    let ms: number;
    try {
      await held.raw('SELECT 1');
      const started = Date.now();
      ready = await request(service.app).get('/healthz/ready');
      ms = Date.now() - started;
    } finally {
      await held.commit();
    }
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ok' });
    expect(ms).toBeLessThan(1000);
  },
);

testOnPostgres(
  'When the probe has asked, then the process holds at most DB_POOL_MAX + 1 connections',
  async () => {
    await request(service.app).get('/healthz/ready').expect(200);
    await request(service.app).get('/posts/public').expect(200);
    expect(
      await countOf(
        service.db.knex,
        "pg_stat_activity WHERE datname = current_database() AND application_name = 'social-posts'",
      ),
    ).toBeLessThanOrEqual(2);
  },
);
