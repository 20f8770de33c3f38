/**
 * The reference the service is measured against: bare node:http and pg, the same SQL the service's
 * repositories send (captured from knex), as the same named prepared statements, the same JWT and
 * bcrypt work, the same JSON and Link header out. No framework, validation library, logger or
 * security headers: the ratio is the cost of those. Only the calls the bench makes are served,
 * with just enough checking to answer them honestly.
 */
import { createSecretKey } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import bcrypt from 'bcrypt';
import jwt from 'jsonwebtoken';
import pg from 'pg';
import { encodeCursor } from '../service/src/posts/posts.cursor';

// A KeyObject, as the service uses: given a string, jsonwebtoken tries a PEM parse on every call.
const secret = createSecretKey(Buffer.from(process.env.SECRET_KEY ?? '', 'utf8'));
const pool = new pg.Pool({
  host: process.env.DB_HOSTNAME ?? '127.0.0.1',
  port: Number(process.env.DB_PORT ?? 5432),
  user: process.env.DB_USERNAME ?? 'postgres',
  password: process.env.DB_PASSWORD ?? '',
  database: process.env.DB_NAME ?? 'postgres',
  max: Number(process.env.DB_POOL_MAX ?? 10),
  statement_timeout: Number(process.env.DB_STATEMENT_TIMEOUT_MS ?? 2000),
});
const dummyHash = bcrypt.hash('not-a-password', Number(process.env.BCRYPT_ROUNDS ?? 12));

const PAGE_TAIL = `select "page".*, "u"."email" as "owner_email", "u"."created_at" as "owner_created_at", (SELECT count(*)::int FROM votes v WHERE v.post_id = page.id) AS votes`;
const FROM_PAGE = `from "page" inner join "users" as "u" on "u"."id" = "page"."user_id"`;
const ORDER = `order by "page"."created_at" desc, "page"."id" desc`;
const POSITION = `(extract(epoch FROM created_at) * 1000000)::bigint::text AS position_micros`;

interface Row {
  id: number;
  title: string;
  content: string;
  published: boolean;
  created_at: Date;
  user_id: number;
  owner_email: string;
  owner_created_at: Date;
  votes: number;
  position_micros: string;
  has_more: boolean;
}

const toPost = (r: Row) => ({
  id: r.id,
  title: r.title,
  content: r.content,
  published: r.published,
  created_at: r.created_at,
  user_id: r.user_id,
  owner: { id: r.user_id, email: r.owner_email, created_at: r.owner_created_at },
  votes: r.votes,
});

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
  });
  res.end(text);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}

async function userFromToken(req: IncomingMessage): Promise<{ id: number } | undefined> {
  const header = req.headers.authorization ?? '';
  if (!header.startsWith('Bearer ')) return undefined;
  try {
    const claims = jwt.verify(header.slice(7), secret, { algorithms: ['HS256'] }) as { sub?: string };
    const { rows } = await pool.query<{ id: number }>({
      name: 'user_by_id',
      text: 'select "id", "email", "created_at" from "users" where "id" = $1',
      values: [Number(claims.sub)],
    });
    return rows[0];
  } catch {
    return undefined;
  }
}

function likeSubstring(search: string): string {
  return `%${search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

async function list(res: ServerResponse, url: URL, userId: number | undefined): Promise<void> {
  const limit = Number(url.searchParams.get('limit') ?? 10);
  const search = url.searchParams.get('search');
  const params: unknown[] = [];
  let where = userId === undefined ? '"published"' : '("published" or "user_id" = $1)';
  if (userId !== undefined) params.push(userId);
  if (search) {
    params.push(likeSubstring(search));
    where += ` and "title" ilike $${String(params.length)}`;
  }
  const n = params.length;
  params.push(limit + 1, 0, limit, limit);
  const text = `with "page" as (select *, ${POSITION} from "posts" where ${where} order by "created_at" desc, "id" desc limit $${String(n + 1)} offset $${String(n + 2)}) ${PAGE_TAIL}, (SELECT count(*) FROM page) > $${String(n + 3)} AS has_more ${FROM_PAGE} ${ORDER} limit $${String(n + 4)}`;
  const name = `posts_${userId === undefined ? 'public' : 'user'}${search ? '_search' : ''}`;
  const { rows } = await pool.query<Row>({ name, text, values: params });
  const last = rows.at(-1);
  if (last?.has_more) {
    const query = `${url.searchParams.has('limit') ? `limit=${String(limit)}&` : ''}${search ? `search=${encodeURIComponent(search)}&` : ''}cursor=${encodeCursor({ micros: last.position_micros, id: last.id })}`;
    res.setHeader('Link', `<${url.pathname}?${query}>; rel="next"`);
  }
  send(res, 200, rows.map(toPost));
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const path = url.pathname;
  if (req.method === 'GET' && path === '/posts/public') return list(res, url, undefined);
  if (req.method === 'POST' && path === '/login') {
    const form = new URLSearchParams(await readBody(req));
    const { rows } = await pool.query<{ id: number; password: string }>({
      name: 'user_by_email',
      text: 'select "id", "email", "created_at", "password" from "users" where lower(email) = lower($1)',
      values: [form.get('username') ?? ''],
    });
    const user = rows[0];
    const matches = await bcrypt.compare(form.get('password') ?? '', user?.password ?? (await dummyHash));
    if (!user || !matches) {
      send(res, 403, { detail: 'Invalid Credentials' });
      return;
    }
    const token = jwt.sign({}, secret, { algorithm: 'HS256', subject: String(user.id), expiresIn: 1800 });
    send(res, 200, { access_token: token, token_type: 'bearer' });
    return;
  }
  const user = await userFromToken(req);
  if (!user) {
    send(res, 401, { detail: 'Not authenticated' });
    return;
  }
  if (req.method === 'GET' && (path === '/posts/' || path === '/posts')) return list(res, url, user.id);
  const byId = /^\/posts\/(\d+)$/.exec(path);
  if (req.method === 'GET' && byId) {
    const { rows } = await pool.query<Row>({
      name: 'post_for_user',
      text: `with "page" as (select * from "posts" where "id" = $1 and ("published" or "user_id" = $2)) ${PAGE_TAIL} ${FROM_PAGE}`,
      values: [Number(byId[1]), user.id],
    });
    if (rows[0]) send(res, 200, toPost(rows[0]));
    else send(res, 404, { detail: 'not found' });
    return;
  }
  if (req.method === 'POST' && path === '/votes/') {
    const vote = JSON.parse(await readBody(req)) as { post_id: number; dir: number };
    const post = (
      await pool.query<{ user_id: number }>({
        name: 'post_owner_for_user',
        text: 'select "user_id" from "posts" where "id" = $1 and ("published" or "user_id" = $2)',
        values: [vote.post_id, user.id],
      })
    ).rows[0];
    if (!post) {
      send(res, 404, { detail: 'not found' });
      return;
    }
    if (vote.dir === 1) {
      const { rowCount } = await pool.query({
        name: 'vote_insert',
        text: 'insert into "votes" ("post_id", "user_id") values ($1, $2) on conflict ("user_id", "post_id") do nothing returning "post_id"',
        values: [vote.post_id, user.id],
      });
      if (rowCount) send(res, 201, { message: 'successfully added vote' });
      else send(res, 409, { detail: 'voted' });
      return;
    }
    const { rowCount } = await pool.query({
      name: 'vote_delete',
      text: 'delete from "votes" where "user_id" = $1 and "post_id" = $2 returning "post_id"',
      values: [user.id, vote.post_id],
    });
    if (rowCount) send(res, 201, { message: 'successfully deleted vote' });
    else send(res, 404, { detail: 'no vote' });
    return;
  }
  send(res, 404, { detail: 'not found' });
}

const server = createServer((req, res) => {
  handle(req, res).catch(() => {
    if (!res.headersSent) send(res, 503, { detail: 'unavailable' });
  });
});
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(
    `${JSON.stringify({ port: (server.address() as AddressInfo).port, msg: 'reference listening' })}\n`,
  );
});
process.on('SIGTERM', () => {
  server.close();
  void pool.end();
});
