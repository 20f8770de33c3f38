import request from 'supertest';
import { countOf } from '../../tools/harness/postgres';
import { documentedAs, expectProblem, uniqueEmail, postsFixture } from './helpers';

const { service: svc } = postsFixture();

describe('POST /users/', () => {
  test('When a new e-mail registers, then 201 returns the user without any password', async () => {
    const email = uniqueEmail();
    const res = await request(svc.app).post('/users/').send({ email, password: 'password123' }).expect(201);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(Object.keys(res.body as object).sort()).toEqual(['created_at', 'email', 'id']);
    const user = res.body as { id: number; email: string; created_at: string };
    expect(Number.isInteger(user.id)).toBe(true);
    expect(user.email).toBe(email);
    expect(new Date(user.created_at).toISOString()).toBe(user.created_at);
  });

  test('When a user registers, then only a bcrypt hash of the password is stored', async () => {
    const email = uniqueEmail();
    await request(svc.app).post('/users/').send({ email, password: 'password123' }).expect(201);
    const row = (await svc.db.knex('users').where({ email }).first()) as { password: string };
    expect(row.password).not.toContain('password123');
    expect(row.password).toMatch(/^\$2[aby]\$\d\d\$/);
  });

  test('When the same e-mail registers twice at once, then one 201 and one 409', async () => {
    const email = uniqueEmail('race');
    const results = await Promise.all(
      [0, 1, 2, 3].map(() => request(svc.app).post('/users/').send({ email, password: 'password123' })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409]);
  });

  test.each([
    ['a missing e-mail', { password: 'password123' }, 'email'],
    ['a malformed e-mail', { email: 'not-an-email', password: 'password123' }, 'email'],
    ['an e-mail that is a number', { email: 42, password: 'password123' }, 'email'],
    ['a missing password', { email: 'x@example.com' }, 'password'],
    ['a 7-byte password', { email: 'x@example.com', password: 'short12' }, 'password'],
    ['a 73-byte password', { email: 'x@example.com', password: 'p'.repeat(73) }, 'password'],
    [
      'a password of 25 three-byte characters (75 bytes)',
      { email: 'x@example.com', password: '€'.repeat(25) },
      'password',
    ],
    ['a password with a NUL', { email: 'x@example.com', password: 'pass\u0000word123' }, 'password'],
    ['a password with a lone surrogate', { email: 'x@example.com', password: '\ud800password' }, 'password'],
  ])('When the body has %s, then 422 names the field and nothing is stored', async (_name, body, field) => {
    const before = await countOf(svc.db.knex, 'users');
    const res = await request(svc.app).post('/users/').send(body);
    const problem = expectProblem(res, 422);
    expect(problem.errors?.map((e) => e.field)).toContain(field);
    const after = await countOf(svc.db.knex, 'users');
    expect(after).toEqual(before);
  });

  test.each([
    ['exactly 72 bytes', 'é'.repeat(36)],
    ['8 bytes in 4 characters', 'é'.repeat(4)],
  ])('When the password is %s, then it is accepted and works for login', async (_name, password) => {
    const email = uniqueEmail();
    await request(svc.app).post('/users/').send({ email, password }).expect(201);
    await request(svc.app).post('/login').type('form').send({ username: email, password }).expect(200);
  });

  test('When unknown fields are sent, then they are ignored', async () => {
    const res = await request(svc.app)
      .post('/users/')
      .send({ email: uniqueEmail(), password: 'password123', id: 999, admin: true })
      .expect(201);
    expect(res.body).not.toHaveProperty('admin');
  });

  test.each(['/users', '/USERS/', '/Users/', '/users//', '/users/x'])(
    'When registering at %s, then 404 (only /users/ answers)',
    async (path) => {
      const res = await request(svc.app).post(path).send({ email: uniqueEmail(), password: 'password123' });
      expectProblem(res, 404);
    },
  );

  test('When /users/ is called with GET, then 405 with Allow: POST', async () => {
    const res = await request(svc.app).get('/users/');
    expectProblem(res, 405);
    expect(res.headers.allow).toBe('POST');
  });
});

describe('The answers and /openapi.json', () => {
  test('When a user registers and logs in, then each answer is what /openapi.json documents it as', async () => {
    const user = await documentedAs(svc.app, 'User');
    const token = await documentedAs(svc.app, 'Token');
    const email = uniqueEmail();
    const password = 'password123';
    const created = await request(svc.app).post('/users/').send({ email, password }).expect(201);
    const login = await request(svc.app)
      .post('/login')
      .type('form')
      .send({ username: email, password })
      .expect(200);
    expect(user(created.body)).toEqual([]);
    expect(token(login.body)).toEqual([]);
    // Neither component takes the other answer: each says what its own holds.
    expect(user(login.body)).not.toEqual([]);
    expect(token(created.body)).not.toEqual([]);
  });
});
