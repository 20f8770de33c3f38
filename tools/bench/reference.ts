/**
 * The reference the service is measured against: bare node:http and pg doing the same database
 * work as the service. Its SQL and bindings are the service's own statements (db/statements.ts),
 * compiled once at start-up from the service's repositories, and sent the same way: one named
 * prepared statement per shape (each list: public or signed in, with or without a search), the
 * caller looked up by id on every authenticated request (by the signed-in list's own statement,
 * as the service does; by a query of its own elsewhere), a pool of DB_POOL_MAX connections. The
 * same JWT (a KeyObject, HS256) and bcrypt work, the same JSON and Link header out. No framework,
 * validation library, logger, metrics or security headers: the ratio is the cost of those. Only
 * the calls the bench makes are served, with just enough checking to answer them honestly.
 *
 * With REFERENCE_VERIFIER=crypto it is the physical limit (tools/bench/limit.ts): the token is checked
 * with node:crypto alone (HMAC-SHA256 over the first two parts, compared in constant time, then
 * the claims the service checks: alg, kid, exp, iat, nbf, sub, iss/aud, no jti) instead of
 * jsonwebtoken, whose own work would otherwise hide part of what the service's token check costs.
 */
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import bcrypt from 'bcrypt';
import jwt from 'jsonwebtoken';
import knex from 'knex';
import pg from 'pg';
import type { Compiled, Statement } from '../../service/src/db/statements';
import { MAX_ID } from '../../service/src/db/limits';
import { claimsAcceptable, TOKEN_ALGORITHM, tokenIssuer, tokenKeys } from '../../service/src/http/tokens';
import { encodeCursor } from '../../service/src/posts/posts.cursor';
import {
  listStatement,
  postOwnerStatements,
  postStatements,
  visiblePost,
  type ListParams,
} from '../../service/src/posts/posts.repository';
import { loadSettings } from '../../service/src/settings';
import { userByEmail, userById } from '../../service/src/users/users.repository';
import { deleteVote, insertVote } from '../../service/src/votes/votes.repository';

// The service's settings, read from the same environment the bench gives the service.
const settings = loadSettings();
// A KeyObject, as the service uses: given a string, jsonwebtoken tries a PEM parse on every call.
const secret = createSecretKey(Buffer.from(settings.secretKey, 'utf8'));
const pool = new pg.Pool({
  // The reference has no embedded database: unset means the local server.
  host: settings.db.hostname ?? '127.0.0.1',
  port: settings.db.port,
  user: settings.db.username,
  password: settings.db.password,
  database: settings.db.name,
  max: settings.db.poolMax,
  statement_timeout: settings.db.statementTimeoutMs,
});
const dummyHash = bcrypt.hash('not-a-password', settings.bcryptRounds);

/** knex only compiles here (no connection is made): the SQL text and the order of its values. */
const compiler = knex({ client: 'pg' });
interface Prepared<P> {
  name: string;
  compiled: Compiled<P>;
}
function prepared<P>(statement: Statement<P>): Prepared<P> {
  return { name: statement.name, compiled: statement.compile(compiler) };
}
async function run<Row, P extends object>(statement: Prepared<P>, params: P): Promise<Row[]> {
  const { rows } = await pool.query({
    name: statement.name,
    text: statement.compiled.text,
    values: statement.compiled.values(params),
  });
  return rows as Row[];
}

const lists = {
  public: prepared(listStatement('public', false, false)),
  public_search: prepared(listStatement('public', true, false)),
  user: prepared(listStatement('user', false, false)),
  user_search: prepared(listStatement('user', true, false)),
};
const findUserById = prepared(userById);
const findUserByEmail = prepared(userByEmail);
const postForUser = prepared(postStatements.user);
const postOwnerForUser = prepared(postOwnerStatements.user);
const voteInsert = prepared(insertVote(visiblePost));
const voteDelete = prepared(deleteVote);

interface Row {
  /** Only in a signed-in list's rows; all the others are null in its row for an empty page. */
  viewer_id?: number;
  id: number | null;
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

const verifier = process.env.REFERENCE_VERIFIER ?? 'jsonwebtoken';
if (verifier !== 'jsonwebtoken' && verifier !== 'crypto') {
  process.stderr.write('REFERENCE_VERIFIER takes jsonwebtoken or crypto\n');
  process.exit(2);
}
/** The service's keys by id (SECRET_KEY and SECRET_KEYS_ACCEPTED), for the crypto verifier. */
const keys = tokenKeys(settings.secretKey, settings.secretKeysAccepted);
const maxLifetimeSeconds = settings.accessTokenExpireMinutes * 60;
const issuer = tokenIssuer(settings.tokenIssuer, maxLifetimeSeconds);
const SUBJECT = /^[1-9][0-9]{0,9}$/;

function parsePart(part: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The subject of an HS256 token checked with node:crypto alone, as the service would accept it. */
function cryptoSubject(token: string): number | undefined {
  const parts = token.split('.');
  if (parts.length !== 3) return undefined;
  const [head = '', body = '', signature = ''] = parts;
  const header = parsePart(head);
  if (header?.alg !== TOKEN_ALGORITHM || 'crit' in header || 'b64' in header) return undefined;
  const kid = header.kid;
  let key: KeyObject | undefined;
  if (typeof kid === 'string') key = keys.byKid.get(kid);
  else if (kid === undefined && keys.byKid.size === 1) key = keys.signing.key;
  if (!key) return undefined;
  const expected = createHmac('sha256', key).update(`${head}.${body}`).digest();
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  const claims = parsePart(body);
  if (!claims || !claimsAcceptable(claims, Date.now() / 1000, maxLifetimeSeconds, issuer)) return undefined;
  const sub = claims.sub;
  if (typeof sub !== 'string' || !SUBJECT.test(sub) || Number(sub) > MAX_ID) return undefined;
  return Number(sub);
}

function librarySubject(token: string): number | undefined {
  try {
    const claims = jwt.verify(token, secret, { algorithms: ['HS256'] }) as { sub?: string };
    return Number(claims.sub);
  } catch {
    return undefined;
  }
}

function tokenSubject(req: IncomingMessage): number | undefined {
  const header = req.headers.authorization ?? '';
  if (!header.startsWith('Bearer ')) return undefined;
  const token = header.slice(7);
  return verifier === 'crypto' ? cryptoSubject(token) : librarySubject(token);
}

async function userFromToken(req: IncomingMessage): Promise<{ id: number } | undefined> {
  const id = tokenSubject(req);
  if (id === undefined) return undefined;
  return (await run<{ id: number }, { id: number }>(findUserById, { id }))[0];
}

function likeSubstring(search: string): string {
  return `%${search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** A list page; a signed-in list's statement also finds the caller: no row at all means 401. */
async function list(res: ServerResponse, url: URL, userId: number | undefined): Promise<void> {
  const limit = Number(url.searchParams.get('limit') ?? 10);
  const search = url.searchParams.get('search');
  const statement = lists[`${userId === undefined ? 'public' : 'user'}${search ? '_search' : ''}`];
  const rows = await run<Row, ListParams>(statement, {
    ...(userId === undefined ? {} : { userId }),
    ...(search ? { search: likeSubstring(search) } : {}),
    limitPlusOne: limit + 1,
    limit,
    offset: 0,
  });
  if (userId !== undefined && rows.length === 0) {
    send(res, 401, { detail: 'Could not validate credentials' });
    return;
  }
  const posts = rows.filter((r) => r.id !== null);
  const last = posts.at(-1);
  if (last?.id != null && last.has_more) {
    const query = `${url.searchParams.has('limit') ? `limit=${String(limit)}&` : ''}${search ? `search=${encodeURIComponent(search)}&` : ''}cursor=${encodeCursor({ micros: last.position_micros, id: last.id })}`;
    res.setHeader('Link', `<${url.pathname}?${query}>; rel="next"`);
  }
  // The public feed leaves the owner's e-mail address out, as the service does.
  send(
    res,
    200,
    posts.map((r) => {
      const post = toPost(r);
      return userId === undefined
        ? { ...post, owner: { id: r.user_id, created_at: r.owner_created_at } }
        : post;
    }),
  );
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const path = url.pathname;
  if (req.method === 'GET' && path === '/posts/public') return list(res, url, undefined);
  if (req.method === 'POST' && path === '/login') {
    const form = new URLSearchParams(await readBody(req));
    const [user] = await run<{ id: number; password: string }, { email: string }>(findUserByEmail, {
      email: form.get('username') ?? '',
    });
    const matches = await bcrypt.compare(form.get('password') ?? '', user?.password ?? (await dummyHash));
    if (!user || !matches) {
      send(res, 403, { detail: 'Invalid Credentials' });
      return;
    }
    const token = jwt.sign({}, secret, {
      algorithm: 'HS256',
      subject: String(user.id),
      issuer: settings.tokenIssuer,
      audience: settings.tokenIssuer,
      expiresIn: 1800,
    });
    send(res, 200, { access_token: token, token_type: 'bearer' });
    return;
  }
  if (req.method === 'GET' && (path === '/posts/' || path === '/posts')) {
    const id = tokenSubject(req);
    if (id === undefined) send(res, 401, { detail: 'Not authenticated' });
    else await list(res, url, id);
    return;
  }
  const user = await userFromToken(req);
  if (!user) {
    send(res, 401, { detail: 'Not authenticated' });
    return;
  }
  const byId = /^\/posts\/(\d+)$/.exec(path);
  if (req.method === 'GET' && byId) {
    const rows = await run<Row, { id: number; userId: number }>(postForUser, {
      id: Number(byId[1]),
      userId: user.id,
    });
    if (rows[0]) send(res, 200, toPost(rows[0]));
    else send(res, 404, { detail: 'not found' });
    return;
  }
  if (req.method === 'POST' && path === '/votes/') {
    const vote = JSON.parse(await readBody(req)) as { post_id: number; dir: number };
    const postVisible = async () =>
      (
        await run<{ user_id: number }, { id: number; userId: number }>(postOwnerForUser, {
          id: vote.post_id,
          userId: user.id,
        })
      ).length > 0;
    if (vote.dir === 1) {
      const [inserted] = await run<{ visible: boolean; added: boolean }, { userId: number; postId: number }>(
        voteInsert,
        { userId: user.id, postId: vote.post_id },
      );
      if (inserted?.added) send(res, 201, { message: 'successfully added vote' });
      else if (inserted?.visible) send(res, 409, { detail: 'voted' });
      else send(res, 404, { detail: 'not found' });
      return;
    }
    if (!(await postVisible())) {
      send(res, 404, { detail: 'not found' });
      return;
    }
    const deleted = await run(voteDelete, { userId: user.id, postId: vote.post_id });
    if (deleted.length > 0) send(res, 201, { message: 'successfully deleted vote' });
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
// The bench always gives PORT; run by hand, an ephemeral one rather than the service's.
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(
    `${JSON.stringify({ port: (server.address() as AddressInfo).port, msg: 'reference listening' })}\n`,
  );
});
process.on('SIGTERM', () => {
  server.close();
  void pool.end();
});
