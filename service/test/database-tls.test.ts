import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openDatabase, type Database } from '../src/db/connection';
import { createLogger } from '../src/logger';
import { describeSettings, loadSettings, SettingsError } from '../src/settings';
import { makeCa, signServer } from '../../testing/certificates';
import { initdb, ownForPostgres, postgresServer, runPostgresTool } from '../../testing/postgres';
import { freePort, startService, stopAll } from '../../testing/service';
import { testEnv, usingPostgres } from './helpers';

/**
 * TLS to PostgreSQL with a private CA (DB_SSL_CA_FILE), as CloudNativePG's clusters need: a
 * PostgreSQL of this file's own that accepts TLS connections only, its certificate signed by a CA
 * made here for the name "localhost". The service must trust that CA, and that CA only, for that
 * name only.
 */
const onPostgres = usingPostgres() ? describe : describe.skip;
const logger = createLogger('silent');

describe('DB_SSL_CA_FILE', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sp-tls-settings-'));
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const settings = (env: Record<string, string>) => () => loadSettings(testEnv({ DB_SSL: 'true', ...env }));

  test('When DB_SSL_CA_FILE names a missing file, then start-up stops with one line naming the setting', () => {
    const missing = path.join(dir, 'missing.crt');
    expect(settings({ DB_SSL_CA_FILE: missing })).toThrow(
      new SettingsError(`Invalid setting DB_SSL_CA_FILE: cannot read ${missing} (ENOENT)`),
    );
  });

  test('When DB_SSL_CA_FILE holds no PEM certificate, then start-up stops naming the setting', () => {
    const file = path.join(dir, 'not-pem.crt');
    writeFileSync(file, 'not a certificate\n');
    expect(settings({ DB_SSL_CA_FILE: file })).toThrow(
      /^Invalid setting DB_SSL_CA_FILE: .* holds no PEM certificate$/,
    );
  });

  test('When DB_SSL_CA_FILE is set without DB_SSL, then start-up stops: a CA without TLS would be ignored', () => {
    const ca = makeCa(dir, 'ca', 'settings test');
    expect(settings({ DB_SSL: 'false', DB_SSL_CA_FILE: ca.cert })).toThrow(
      'Invalid setting DB_SSL_CA_FILE: it needs DB_SSL=true',
    );
  });

  test('When DB_SSL_CA_FILE is a PEM file, then the database settings carry its path and the logged settings name it', () => {
    const ca = makeCa(dir, 'ca2', 'settings test');
    const loaded = settings({ DB_SSL_CA_FILE: ca.cert })();
    expect(loaded.db.sslCaFile).toBe(ca.cert);
    expect(describeSettings({ ...loaded, db: { ...loaded.db, hostname: 'db' } }).database).toMatchObject({
      ssl: true,
      sslCaFile: ca.cert,
    });
    expect(settings({})().db.sslCaFile).toBeUndefined();
  });
});

onPostgres('TLS to PostgreSQL verified against a private CA', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'sp-tls-pg-'));
  const data = path.join(dir, 'data');
  let port = 0;
  let ca = { cert: '', key: '' };
  let stranger = { cert: '', key: '' };
  const opened: Database[] = [];
  const env = (overrides: Record<string, string>) =>
    testEnv({
      DB_HOSTNAME: 'localhost',
      DB_PORT: String(port),
      DB_USERNAME: postgresServer.user,
      DB_NAME: 'postgres',
      DB_SSL: 'true',
      DB_SSL_CA_FILE: ca.cert,
      ...overrides,
    });
  const open = async (overrides: Record<string, string>) => {
    const db = await openDatabase(loadSettings(env(overrides)), logger);
    opened.push(db);
    return db;
  };

  beforeAll(async () => {
    ownForPostgres(dir);
    ca = makeCa(dir, 'ca', 'test cluster CA');
    stranger = makeCa(dir, 'stranger', 'another CA');
    const server = signServer(dir, 'server', ca, ['localhost']);
    port = await freePort();
    initdb(data, postgresServer.user, ['-A', 'trust', '--no-sync']);
    // TLS or nothing: a connection without it is refused, so a success proves TLS was used.
    writeFileSync(
      path.join(data, 'pg_hba.conf'),
      'local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n',
    );
    ownForPostgres(path.join(data, 'pg_hba.conf'));
    const options = [
      `-p ${String(port)}`,
      `-k ${dir}`,
      "-c listen_addresses='localhost'",
      '-c ssl=on',
      `-c ssl_cert_file=${server.cert}`,
      `-c ssl_key_file=${server.key}`,
    ].join(' ');
    runPostgresTool('pg_ctl', ['-D', data, '-o', options, '-l', path.join(dir, 'log'), '-w', 'start']);
  });

  afterAll(async () => {
    await stopAll();
    await Promise.all(opened.map((db) => db.close()));
    runPostgresTool('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    rmSync(dir, { recursive: true, force: true });
  });

  test("When the server's certificate chains to DB_SSL_CA_FILE and names the host dialled, then the service connects over TLS", async () => {
    const db = await open({});
    const { rows } = await db.knex.raw<{ rows: { ssl: boolean }[] }>(
      'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
    );
    expect(rows).toEqual([{ ssl: true }]);
  });

  test('When the certificate does not name the host dialled (127.0.0.1, not localhost), then no connection is made and the error says why', async () => {
    const db = await open({ DB_HOSTNAME: '127.0.0.1' });
    await expect(db.knex.raw('SELECT 1')).rejects.toThrow(/does not match certificate's altnames/);
  });

  test('When DB_SSL_CA_FILE is another CA, then no connection is made and the error says the chain is untrusted', async () => {
    const db = await open({ DB_SSL_CA_FILE: stranger.cert });
    await expect(db.knex.raw('SELECT 1')).rejects.toThrow(
      /unable to (get local issuer|verify the first) certificate/,
    );
  });

  test('When DB_SSL_CA_FILE is unset, then only the public roots are trusted and the private CA is refused', async () => {
    const settings = loadSettings(env({}));
    const db = await openDatabase({ ...settings, db: { ...settings.db, sslCaFile: undefined } }, logger);
    opened.push(db);
    await expect(db.knex.raw('SELECT 1')).rejects.toThrow(
      /unable to (get local issuer|verify the first) certificate/,
    );
  });

  test('When the service starts with the CA, then it migrates, reports ready, and a user can register and log in', async () => {
    const service = await startService(env({ PORT: '0', LOG_LEVEL: 'info', DB_NAME: 'postgres' }));
    expect((await fetch(`${service.base}/healthz/ready`)).status).toBe(200);
    const email = `tls-${Date.now().toString(36)}@example.com`;
    const registered = await fetch(`${service.base}/users/`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ email, password: 'correct horse battery' }),
    });
    expect(registered.status).toBe(201);
    const login = await fetch(`${service.base}/login`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ username: email, password: 'correct horse battery' }),
    });
    expect(login.status).toBe(200);
    expect(((await login.json()) as { access_token?: string }).access_token).toEqual(expect.any(String));
  });

  // Last: it moves the server to another certificate.
  test('When the CA is renewed (the server presents a certificate of the new CA and the mounted file follows), then new connections trust it without a restart', async () => {
    const mounted = path.join(dir, 'mounted-ca.crt');
    copyFileSync(ca.cert, mounted);
    const db = await open({ DB_SSL_CA_FILE: mounted });
    await db.knex.raw('SELECT 1');
    // The renewal: a certificate from the new CA, which PostgreSQL loads on reload, and the kubelet
    // updating the Secret's file in the pod.
    const renewed = makeCa(dir, 'renewed', 'renewed cluster CA');
    signServer(dir, 'server', renewed, ['localhost']);
    runPostgresTool('pg_ctl', ['-D', data, '-w', 'reload']);
    copyFileSync(renewed.cert, mounted);
    // The service looks at the file at most every 2 s.
    await new Promise((resolve) => setTimeout(resolve, 2100));
    // The pooled connection is held by the transaction, so the next query opens a new one.
    await db.knex.transaction(async (trx) => {
      await trx.raw('SELECT 1');
      const { rows } = await db.knex.raw<{ rows: { ssl: boolean }[] }>(
        'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
      );
      expect(rows).toEqual([{ ssl: true }]);
    });
  });
});
