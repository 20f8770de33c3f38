/**
 * `npm run dev:edit-to-live -- [--edits 5] [--rebuild]`
 *
 * The inner loop's figure: from saving a file to the running service answering with the change.
 * Builds the Dockerfile's dev stage (what `skaffold dev` deploys) with the engine of
 * tools/container.ts, runs it on the host network against a scratch database on the suites'
 * PostgreSQL (tools/harness/postgres.ts), then `--edits` times changes the answer of /healthz/live in a
 * copy of service/src/health.ts and puts it into the container as skaffold's file sync does (a tar
 * stream into `exec -i <container> tar xmf - -C / --no-same-owner`, skaffold's
 * pkg/skaffold/sync/kubectl.go at commit 59d2521e568119501b63422a4aaf01e843fd0974), timing from
 * the copy's start to the first answer that shows the edit; then adds a migration (its file and
 * its line in migrations/index.ts, synced together) and times until the service reports it applied
 * (`db_migrations_applied` on the metrics port). Prints the median and the maximum.
 *
 * `--rebuild`: the loop without sync, as `skaffold dev` ran before the dev stage: each edit builds
 * the production image (the default stage, layers cached) and starts a container of it, timed
 * from the build's start to the answer that shows the edit. The Kubernetes rollout is not counted.
 *
 * The repository's files are never changed: the edits are made in a scratch copy of the build
 * context. Every container is removed by name at the end, and the scratch database dropped.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { median } from './measure';
import { build, commandLine, engine, run, runLimits } from '../container';
import { repoRoot } from '../node-release';
import { ensureBase } from '../stand-in-base';
import { pollUntil, probe } from '../harness/poll';
import { connectionEnv, createScratchDatabase } from '../harness/postgres';
import { freePort } from '../harness/service';
import { cpusText, flag, loadAverageText, option, runMain, usage } from './common';

const USAGE = `usage: npm run dev:edit-to-live -- [--edits N] [--rebuild]
  --edits N   edits to time, 1 to 50 (default 5; with --rebuild each one is an image build)
  --rebuild   time the production image's rebuild and restart per edit instead of the dev stage's sync
`;

/** The options, read at load so runMain refuses any other (exit 2); --help prints the usage. */
function options(): { edits: number; rebuild: boolean } {
  const editsText = option('edits', '5');
  const rebuild = flag('rebuild');
  if (flag('help')) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  const edits = Number(editsText);
  usage(
    Number.isInteger(edits) && edits >= 1 && edits <= 50,
    `--edits takes a whole number from 1 to 50, not ${editsText}\n${USAGE}`,
  );
  return { edits, rebuild };
}

const { edits, rebuild } = options();

const log = (line: string) => {
  process.stdout.write(`[edit-to-live] ${line}\n`);
};

/** What the build reads (.dockerignore's complement), copied so edits never touch the checkout. */
const CONTEXT = [
  'Dockerfile',
  '.dockerignore',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'service/src',
  'migrations',
];
const HEALTH = 'service/src/health.ts';
const LIVE_ANSWER = "answer(res, 200, { status: 'ok' });";
/** Where the dev stage keeps the sources (its WORKDIR). */
const APP = '/app';

/** health.ts with /healthz/live answering `edit` as well. */
function editedHealth(marker: string): string {
  const source = readFileSync(join(repoRoot, HEALTH), 'utf8');
  if (!source.includes(LIVE_ANSWER))
    throw new Error(`${HEALTH} no longer contains ${LIVE_ANSWER}: update this script`);
  return source.replace(LIVE_ANSWER, `answer(res, 200, { status: 'ok', edit: '${marker}' });`);
}

/** A migration that adds a table, and migrations/index.ts importing and listing it. */
function newMigration(name: string): Record<string, string> {
  const index = readFileSync(join(repoRoot, 'migrations/index.ts'), 'utf8');
  // The list's opening line, whatever type its entries are given.
  const listStart = /export const migrations: Record<string, [\w.]+> = \{\n/.exec(index)?.[0];
  if (!listStart) throw new Error(`migrations/index.ts no longer contains its list: update this script`);
  return {
    [`migrations/${name}.ts`]: [
      "import type { Knex } from 'knex';",
      '',
      'export async function up(knex: Knex): Promise<void> {',
      "  await knex.schema.createTable('edit_to_live', (t) => t.increments('id'));",
      '}',
      '',
      'export async function down(knex: Knex): Promise<void> {',
      "  await knex.schema.dropTable('edit_to_live');",
      '}',
      '',
    ].join('\n'),
    'migrations/index.ts': `import * as editToLive from './${name}';\n${index.replace(
      listStart,
      `${listStart}  '${name}': editToLive,\n`,
    )}`,
  };
}

/** The files at their container paths in a tar stream, unpacked by tar in the container, as skaffold syncs. */
async function syncIn(container: string, files: Record<string, string>): Promise<void> {
  const staging = mkdtempSync(join(tmpdir(), 'social-posts-sync-'));
  try {
    const entries = Object.entries(files).map(([file, text]) => {
      const entry = join(APP, file).slice(1);
      mkdirSync(dirname(join(staging, entry)), { recursive: true });
      writeFileSync(join(staging, entry), text);
      return entry;
    });
    const tar = spawn('tar', ['c', '-C', staging, ...entries], { stdio: ['ignore', 'pipe', 'inherit'] });
    const untar = spawn(
      ...commandLine(['exec', '-i', container, 'tar', 'xmf', '-', '-C', '/', '--no-same-owner']),
      {
        stdio: ['pipe', 'inherit', 'inherit'],
      },
    );
    tar.stdout.pipe(untar.stdin);
    const exited = (child: ChildProcess) =>
      new Promise<number | null>((resolvePromise) => child.on('close', resolvePromise));
    const [tarStatus, untarStatus] = await Promise.all([exited(tar), exited(untar)]);
    if (tarStatus !== 0 || untarStatus !== 0)
      throw new Error(
        `sync into ${container} failed (tar ${String(tarStatus)}, exec ${String(untarStatus)})`,
      );
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

interface Target {
  port: number;
  metricsPort: number;
}

/** Polls `path` until `holds` is true of its answer; the ms from `since`. Throws after the time. */
async function answered(
  port: number,
  path: string,
  holds: (answer: { status: number; body: string }) => boolean,
  since: number,
  withinMs: number,
): Promise<number> {
  const { held, value } = await pollUntil(() => probe(port, path, 1000), holds, { withinMs, everyMs: 20 });
  if (!held)
    throw new Error(
      `${path} on port ${String(port)} did not change within ${String(withinMs)} ms (last: ${String(value.status)} ${value.body.slice(0, 200)})`,
    );
  return Date.now() - since;
}

const liveShows = (marker: string) => (answer: { status: number; body: string }) =>
  answer.status === 200 && answer.body.includes(`"edit":"${marker}"`);

/** Starts a container of `image` on the host network, its own ports, the scratch database. */
function startContainer(name: string, image: string, target: Target, database: string): void {
  started.add(name);
  const env = {
    // The chart's ConfigMap says production; a Secret gives the key.
    NODE_ENV: 'production',
    SECRET_KEY: randomBytes(32).toString('hex'),
    BCRYPT_ROUNDS: '10',
    PORT: String(target.port),
    METRICS_PORT: String(target.metricsPort),
    ...connectionEnv(),
    DB_NAME: database,
    LOG_LEVEL: 'warn',
  };
  run(
    [
      'run',
      '--detach',
      '--name',
      name,
      '--network',
      'host',
      ...runLimits(),
      ...Object.entries(env).flatMap(([key, value]) => ['--env', `${key}=${value}`]),
      image,
    ],
    { quiet: true },
  );
}

/** The containers this run started and has not removed yet, removed by name on Ctrl-C as well. */
const started = new Set<string>();

function removeContainer(name: string): void {
  spawnSync(...commandLine(['rm', '--force', name]), { stdio: 'ignore' });
  started.delete(name);
}

process.on('SIGINT', () => {
  for (const name of started) removeContainer(name);
  process.exit(130);
});

function scratchContext(): string {
  const context = mkdtempSync(join(tmpdir(), 'social-posts-context-'));
  for (const entry of CONTEXT) cpSync(join(repoRoot, entry), join(context, entry), { recursive: true });
  return context;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

/** The figures, and how busy the machine was: on a shared host the load decides them. */
function summary(what: string, times: number[]): void {
  log(
    `${what}: median ${seconds(median(times))}, max ${seconds(Math.max(...times))} over ${String(times.length)} (${times.map(seconds).join(', ')})`,
  );
  log(`load average ${loadAverageText()} on ${cpusText()}`);
}

async function syncLoop(edits: number, context: string, database: string, runId: string): Promise<void> {
  const image = 'social-posts:dev';
  const container = `social-posts-edit-to-live-${runId}`;
  const target = { port: await freePort(), metricsPort: await freePort() };
  const buildStart = Date.now();
  build(context, image, log, 'dev');
  log(`dev stage built in ${seconds(Date.now() - buildStart)}`);
  try {
    const runStart = Date.now();
    startContainer(container, image, target, database);
    await answered(target.port, '/healthz/ready', (answer) => answer.status === 200, runStart, 120_000);
    log(`dev container ready in ${seconds(Date.now() - runStart)} (migrations run)`);
    const times: number[] = [];
    for (let i = 1; i <= edits; i++) {
      const marker = `${runId}-${String(i)}`;
      const text = editedHealth(marker);
      const since = Date.now();
      await syncIn(container, { [HEALTH]: text });
      const copied = Date.now() - since;
      const ms = await answered(target.port, '/healthz/live', liveShows(marker), since, 60_000);
      log(`edit ${String(i)}: live in ${seconds(ms)} (the copy ${seconds(copied)}, then the restart)`);
      times.push(ms);
    }
    summary('edit to live (sync, watch restart)', times);

    const metrics = async () => (await probe(target.metricsPort, '/metrics', 1000)).body;
    const applied = (body: string) => Number(/^db_migrations_applied (\d+)$/m.exec(body)?.[1] ?? NaN);
    const before = applied(await metrics());
    if (!Number.isInteger(before)) throw new Error('the metrics page has no db_migrations_applied');
    const since = Date.now();
    await syncIn(container, newMigration(`29991231000000_edit_to_live_${runId}`));
    const ms = await answered(
      target.metricsPort,
      '/metrics',
      (answer) => applied(answer.body) === before + 1,
      since,
      60_000,
    );
    log(`new migration: applied (${String(before)} → ${String(before + 1)}) and serving in ${seconds(ms)}`);
  } finally {
    removeContainer(container);
  }
}

async function rebuildLoop(edits: number, context: string, database: string, runId: string): Promise<void> {
  const image = 'social-posts:edit-to-live';
  const times: number[] = [];
  // A first build outside the timing, so each timed one starts with the same layers cached.
  build(context, image, log);
  for (let i = 1; i <= edits; i++) {
    const marker = `${runId}-${String(i)}`;
    writeFileSync(join(context, HEALTH), editedHealth(marker));
    const container = `social-posts-edit-to-live-${runId}-${String(i)}`;
    const target = { port: await freePort(), metricsPort: await freePort() };
    const since = Date.now();
    try {
      build(context, image, log);
      const built = Date.now() - since;
      startContainer(container, image, target, database);
      const ms = await answered(target.port, '/healthz/live', liveShows(marker), since, 120_000);
      log(`edit ${String(i)}: image built in ${seconds(built)}, live in ${seconds(ms)}`);
      times.push(ms);
    } finally {
      removeContainer(container);
    }
  }
  summary('edit to live (production image rebuilt, container restarted)', times);
}

async function main(): Promise<void> {
  log(`engine: ${engine().name}; base: ${ensureBase(log)}`);
  const runId = `${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const context = scratchContext();
  const database = await createScratchDatabase('edit_to_live');
  try {
    if (rebuild) await rebuildLoop(edits, context, database.name, runId);
    else await syncLoop(edits, context, database.name, runId);
  } finally {
    await database.drop();
    rmSync(context, { recursive: true, force: true });
  }
}

runMain(main);
