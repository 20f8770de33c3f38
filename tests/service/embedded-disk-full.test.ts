import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { account, call } from '../../tools/harness/client';
import { startService, stopAll } from '../../tools/harness/service';
import { migratedDatabaseEnv, testEnv, uniqueEmail, usingPostgres } from './helpers';

/** PostgreSQL's WAL segment, which PGlite writes in full when it starts the next one. */
const WAL_SEGMENT = 16 * 1024 * 1024;

// A filesystem that fills up is a tmpfs of its own, which only root may mount.
const describeOnSmallDisk = !usingPostgres() && process.getuid?.() === 0 ? describe : describe.skip;

afterAll(stopAll);

describeOnSmallDisk('The embedded database on a disk that fills up', () => {
  let mount: string;

  beforeEach(() => {
    mount = mkdtempSync(path.join(tmpdir(), 'sp-full-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=96m', 'tmpfs', mount]);
  });

  afterEach(async () => {
    await stopAll();
    execFileSync('umount', [mount]);
    rmSync(mount, { recursive: true, force: true });
  });

  // A conditional PUT is one transaction, whose COMMIT is what writes the WAL: a failure there is a
  // PANIC after which PGlite never returns, so the process can only stop without answering.
  test.each([
    ['an update', 503, {}],
    ['an update in a transaction (If-Match: *)', 'connection closed', { 'If-Match': '*' }],
  ])(
    'When its WAL cannot start a new segment under %s, then that update gets %p and the process exits 1 saying so instead of hanging, and once space is back a restart has every update answered 200',
    async (_, failed, headers: Record<string, string>) => {
      const template = await migratedDatabaseEnv();
      const dir = path.join(mount, 'db');
      try {
        cpSync(template.env.DB_EMBEDDED_DIR ?? '', dir, { recursive: true });
      } finally {
        await template.drop();
      }
      // The WAL is taken to just below three quarters of its segment, past which a checkpoint (one at
      // start-up too) makes the next segment ready ahead; so the updates below are what need the next one.
      const pglite = new PGlite(dir);
      const position = async () =>
        (
          await pglite.query<{ offset: string; file: string }>(
            `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn) % ${String(WAL_SEGMENT)} AS offset,
             pg_walfile_name(pg_current_wal_insert_lsn()) AS file`,
          )
        ).rows[0];
      const short = WAL_SEGMENT * 0.75 - 256 * 1024 - Number((await position())?.offset);
      if (short > 0)
        await pglite.query('SELECT pg_logical_emit_message(false, $1, repeat($2, $3))', ['fill', 'x', short]);
      const current = (await position())?.file ?? '';
      await pglite.close();
      // The segments the shutdown's checkpoint made ready ahead are unused: without them the next is made on demand.
      for (const file of readdirSync(path.join(dir, 'pg_wal')))
        if (/^[0-9A-F]{24}$/.test(file) && file > current) rmSync(path.join(dir, 'pg_wal', file));

      // The disk keeps room for the tables' pages but not for another WAL segment.
      const { bavail, bsize } = statfsSync(mount);
      const filler = path.join(mount, 'filler');
      writeFileSync(filler, Buffer.alloc(bavail * bsize - WAL_SEGMENT * 0.75));

      const env = testEnv({ LOG_LEVEL: 'info', PORT: '0', DB_EMBEDDED_DIR: dir });
      const svc = await startService(env);
      const token = await account(svc.base, uniqueEmail('full'));
      const created = await call(svc.base, '/posts/', { token, json: { title: 'full', content: 'first' } });
      expect(created.status).toBe(201);
      const id = (created.body as { id: number }).id;

      let lastStored = 'first';
      const refused: (number | string)[] = [];
      for (let i = 0; i < 5000 && refused.length === 0; i++) {
        const answer = await call(svc.base, `/posts/${String(id)}`, {
          method: 'PUT',
          token,
          headers,
          json: { title: 'full', content: `update ${String(i)} ${randomBytes(3000).toString('base64')}` },
          timeoutMs: 5000,
        }).catch((error: unknown) => ({
          status: (error as Error).name === 'TimeoutError' ? 'no answer in 5 s' : 'connection closed',
          body: undefined,
        }));
        if (answer.status === 200) lastStored = (answer.body as { content: string }).content;
        else refused.push(answer.status);
      }
      // Answered as the database being unavailable, or ended at once: never left hanging.
      expect(refused).toEqual([failed]);
      let timer: NodeJS.Timeout | undefined;
      const code = await Promise.race([
        svc.exited,
        new Promise((resolve) => {
          timer = setTimeout(resolve, 10_000, 'still running');
        }),
      ]);
      clearTimeout(timer);
      expect(code).toBe(1);
      expect(svc.lines.filter((line) => line.level === 60).map((line) => line.msg)).toEqual([
        expect.stringMatching(/^the embedded database could not write its WAL \(.*No space left on device\)/),
      ]);

      rmSync(filler);
      const again = await startService(env);
      const read = await call(again.base, `/posts/${String(id)}`, { token });
      expect((read.body as { content: string }).content).toBe(lastStored);
    },
    120_000,
  );
});
