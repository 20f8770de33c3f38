import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { openDatabase, type Database } from '../../service/src/db/connection';
import { isDatabaseUnavailable, operatorHint } from '../../service/src/db/errors';
import { createLogger } from '../../service/src/logger';
import { describeSettings, loadSettings, SettingsError } from '../../service/src/settings';
import { makeCa, signServer } from '../../tools/harness/certificates';
import { knexTo, ownForPostgres, OwnPostgres, postgresServer } from '../../tools/harness/postgres';
import {
  spawnScript,
  startService,
  stopAll,
  type LogLine,
  type ScriptProcess,
} from '../../tools/harness/service';
import { account, ACCOUNT_PASSWORD, call, sleep } from '../../tools/harness/client';
import { pollUntil } from '../../tools/harness/poll';
import { describeOnPostgres, rowsOf, testEnv } from './helpers';

/**
 * TLS to PostgreSQL with a private CA (DB_SSL_CA_FILE), as CloudNativePG's clusters need: a
 * PostgreSQL of this file's own that accepts TLS connections only, its certificate signed by a CA
 * made here for the name "localhost". The service must trust that CA, and that CA only, for that
 * name only.
 */
const logger = createLogger('silent');
/** What the TLS layer says of a server certificate whose chain it cannot verify. */
const UNTRUSTED = /unable to (get local issuer|verify the first) certificate/;

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

describeOnPostgres('TLS to PostgreSQL verified against a private CA', () => {
  const pg = new OwnPostgres();
  const { dir } = pg;
  let ca = { cert: '', key: '' };
  let stranger = { cert: '', key: '' };
  const opened: Database[] = [];
  // The server's view, over its Unix socket (not TLS, not the service's name): who is connected how.
  let admin: Knex;
  const env = (overrides: Record<string, string>) =>
    testEnv({
      DB_HOSTNAME: 'localhost',
      DB_PORT: String(pg.port),
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
  /** Whether the connection a new query on `db` gets is TLS, as the server sees it. */
  const sslOf = (db: Database) =>
    rowsOf<{ ssl: boolean }>(db.knex, 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');

  beforeAll(async () => {
    await pg.init();
    ca = makeCa(dir, 'ca', 'test cluster CA');
    stranger = makeCa(dir, 'stranger', 'another CA');
    const server = signServer(dir, 'server', ca, ['localhost']);
    // TLS or nothing: a connection without it is refused, so a success proves TLS was used.
    const hba = path.join(pg.data, 'pg_hba.conf');
    writeFileSync(
      hba,
      'local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n',
    );
    ownForPostgres(hba);
    pg.start(true, [
      "-c listen_addresses='localhost'",
      '-c ssl=on',
      `-c ssl_cert_file=${server.cert}`,
      `-c ssl_key_file=${server.key}`,
    ]);
    admin = knexTo('postgres', 1, { ...postgresServer, host: dir, port: pg.port });
  });

  afterAll(async () => {
    await stopAll();
    await admin.destroy();
    await Promise.all(opened.map((db) => db.close()));
    pg.destroy();
  });

  test("When the server's certificate chains to DB_SSL_CA_FILE and names the host dialled, then the service connects over TLS", async () => {
    expect(await sslOf(await open({}))).toEqual([{ ssl: true }]);
  });

  test('When the certificate does not name the host dialled (127.0.0.1, not localhost), then no connection is made and the error says why', async () => {
    const db = await open({ DB_HOSTNAME: '127.0.0.1' });
    await expect(db.knex.raw('SELECT 1')).rejects.toThrow(/does not match certificate's altnames/);
  });

  test('When DB_SSL_CA_FILE is another CA, then no connection is made and the error says the chain is untrusted', async () => {
    const db = await open({ DB_SSL_CA_FILE: stranger.cert });
    await expect(db.knex.raw('SELECT 1')).rejects.toThrow(UNTRUSTED);
  });

  test('When DB_SSL_CA_FILE is unset, then only the public roots are trusted and the private CA is refused', async () => {
    const settings = loadSettings(env({}));
    const db = await openDatabase({ ...settings, db: { ...settings.db, sslCaFile: undefined } }, logger);
    opened.push(db);
    await expect(db.knex.raw('SELECT 1')).rejects.toThrow(UNTRUSTED);
  });

  test('When the service starts with the CA, then it migrates, reports ready, and a user can register and log in', async () => {
    const service = await startService(env({ PORT: '0', LOG_LEVEL: 'info', DB_NAME: 'postgres' }));
    expect((await fetch(`${service.base}/healthz/ready`)).status).toBe(200);
    // Registered 201 and logged in 200, or account throws; the token is the login's answer.
    expect(await account(service.base, `tls-${Date.now().toString(36)}@example.com`)).toEqual(
      expect.any(String),
    );
    // The earlier cases' pools closed first, every connection under the service's name is the process's.
    await Promise.all(opened.splice(0).map((db) => db.close()));
    const { rows } = await admin.raw<{ rows: { ssl: boolean; version: string | null }[] }>(
      "SELECT s.ssl, s.version FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'social-posts'",
    );
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) {
      expect(row.ssl).toBe(true);
      expect(row.version).toMatch(/^TLSv1\.[23]$/);
    }
  });

  /** Starts against a server it cannot trust; migrating comes before listening, so no port may open. */
  const refusedStart = async (overrides: Record<string, string>) => {
    // At debug the fatal line carries the error itself beside its one-line account.
    const proc = spawnScript('service/src/main.ts', env({ PORT: '0', LOG_LEVEL: 'debug', ...overrides }));
    // Bounded: a service that starts anyway is stopped, and the case fails on `listened`.
    const first = await proc.waitForLog(/^listening on|; not starting$/, 20_000);
    const code = /^listening on/.test(first.msg ?? '') ? await proc.stop() : await proc.exited;
    const fatal = proc.lines.find((l) => l.level === 60);
    return {
      code,
      listened: proc.lines.some((l) => /^listening on/.test(l.msg ?? '')),
      error: (fatal?.err as { message?: string; code?: string } | undefined) ?? {},
      hint: typeof fatal?.hint === 'string' ? fatal.hint : '',
    };
  };

  test('When the service dials an address its certificate does not name (127.0.0.1), then it does not start, and its log says the host does not match the certificate', async () => {
    const started = await refusedStart({ DB_HOSTNAME: '127.0.0.1' });
    expect(started).toMatchObject({ code: 1, listened: false });
    expect(started.error.code).toBe('ERR_TLS_CERT_ALTNAME_INVALID');
    expect(started.error.message).toMatch(/IP: 127\.0\.0\.1 is not in the cert's list/);
    expect(started.hint).toContain('name DB_HOSTNAME');
  });

  test('When DB_SSL_CA_FILE is a CA that did not sign the server certificate, then the service does not start, and its log says the certificate is untrusted', async () => {
    const started = await refusedStart({ DB_SSL_CA_FILE: stranger.cert });
    expect(started).toMatchObject({ code: 1, listened: false });
    expect(started.error.message).toMatch(UNTRUSTED);
    expect(started.hint).toContain('chain to DB_SSL_CA_FILE');
  });

  test('When a running service meets a server certificate it does not trust (the server moved to another CA), then readiness and requests answer 503, never 500, the log names the setting to check, and it recovers once the certificate is trusted again', async () => {
    const service = await startService(env({ PORT: '0', LOG_LEVEL: 'info' }));
    const register = () =>
      call(service.base, '/users/', {
        json: { email: `tls-${Date.now().toString(36)}@example.com`, password: ACCOUNT_PASSWORD },
      });
    expect((await fetch(`${service.base}/healthz/ready`)).status).toBe(200);
    try {
      // A CA renewal seen by a pod whose mounted CA file has not followed yet.
      signServer(dir, 'server', stranger, ['localhost']);
      pg.reload();
      // The pooled connections, made before, would still serve: end them, so new ones are needed.
      await admin.raw(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'social-posts'",
      );
      // A pooled connection may not have read its termination yet and fail with that first (also
      // 503): probe until a fresh connection meets the certificate, each answer 503 on the way.
      const unready = await probeUntilLogged(
        service,
        async () => {
          expect((await fetch(`${service.base}/healthz/ready`)).status).toBe(503);
        },
        'readiness check failed',
      );
      // Node 24 appends a hint about --use-system-ca to OpenSSL's reason.
      expect(unready).toMatchObject({
        err: { message: expect.stringMatching(/^unable to verify the first certificate\b/) as unknown },
      });
      expect(unready.hint).toMatch(/DB_SSL_CA_FILE/);
      const failed = await probeUntilLogged(
        service,
        async () => {
          const refused = await register();
          expect(refused.status).toBe(503);
          expect(refused.retryAfter).toBe('1');
        },
        'request failed',
      );
      expect(failed).toMatchObject({ err: { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' } });
      expect(failed.hint).toMatch(/DB_SSL_CA_FILE/);
    } finally {
      signServer(dir, 'server', ca, ['localhost']);
      pg.reload();
    }
    expect((await fetch(`${service.base}/healthz/ready`)).status).toBe(200);
    expect((await register()).status).toBe(201);
    await service.stop();
  });

  test('When DB_SSL is true and the server offers no TLS, then it counts as unavailable (503, not 500) and the start stops with a hint naming the setting', async () => {
    // The shared test server (DB_HOSTNAME) runs without TLS.
    const db = await openDatabase(loadSettings(testEnv({ DB_SSL: 'true' })), logger);
    opened.push(db);
    const error: unknown = await db.knex.raw('SELECT 1').catch((e: unknown) => e);
    expect(isDatabaseUnavailable(error)).toBe(true);
    expect(operatorHint(error)).toContain('DB_SSL=true but the server offers no TLS');
    const refused = spawnScript(
      'service/src/main.ts',
      testEnv({ PORT: '0', LOG_LEVEL: 'info', DB_SSL: 'true' }),
    );
    expect(await refused.exited).toBe(1);
    expect(refused.lines.filter((l) => l.level === 60).map((l) => l.msg)).toEqual([
      expect.stringContaining(
        'DB_SSL=true but the server offers no TLS: turn ssl on at the server (or the pooler), or set DB_SSL=false; not starting',
      ),
    ]);
  });

  // Last: it moves the server to another certificate.
  test('When the CA is renewed (the server presents a certificate of the new CA and the mounted file follows), then new connections trust it without a restart', async () => {
    const mounted = path.join(dir, 'mounted-ca.crt');
    copyFileSync(ca.cert, mounted);
    const db = await open({ DB_SSL_CA_FILE: mounted });
    await db.knex.raw('SELECT 1');
    // The renewal: the server reloads a certificate of the new CA, and the kubelet updates the file.
    const renewed = makeCa(dir, 'renewed', 'renewed cluster CA');
    signServer(dir, 'server', renewed, ['localhost']);
    pg.reload();
    copyFileSync(renewed.cert, mounted);
    // The service looks at the file at most every 2 s.
    await sleep(2100);
    // The pooled connection is held by the transaction, so the next query opens a new one.
    await db.knex.transaction(async (trx) => {
      await trx.raw('SELECT 1');
      expect(await sslOf(db)).toEqual([{ ssl: true }]);
    });
  });
});

/**
 * Runs `probe` (which asserts its own answer) until a line `msg` written after it names an error other
 * than a terminated connection's, for up to 5 s; the line may reach this process a little after the
 * answer did.
 */
async function probeUntilLogged(
  proc: ScriptProcess,
  probe: () => Promise<void>,
  msg: string,
): Promise<LogLine> {
  const match = (line: LogLine) =>
    line.msg === msg && !/terminat/.test((line.err as { message?: string } | undefined)?.message ?? '');
  const probed = async () => {
    const from = proc.lines.length;
    await probe();
    const seen = () => proc.lines.slice(from).find(match);
    return (await pollUntil(seen, Boolean, { withinMs: 300, everyMs: 20 })).value;
  };
  const { value } = await pollUntil(probed, Boolean, { withinMs: 5000, everyMs: 0 });
  if (!value) throw new Error('no matching log line within 5 s of probing');
  return value;
}
