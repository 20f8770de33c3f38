/**
 * `npx tsx scripts/pgbouncer.ts`: the two real PgBouncers the reliability suite and the bench run,
 * one path a line: 1.18 from Debian 12's package (no prepared-statement tracking) and 1.24.1
 * built from Debian 13's source package (tracks named statements; `max_prepared_statements` 200 by
 * default). The build goes to a cache outside the checkout, so a fresh clone on the same machine
 * (CI) reuses it: about 30 s once, nothing after.
 *
 * The source comes through a private apt configuration (its own sources list, lists and cache
 * folders): the machine's own sources are never touched. Needs dpkg-dev, make, a C compiler and
 * Debian 12's libevent-dev, libssl-dev, libc-ares-dev and pkg-config (.ci/run installs them).
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const PGBOUNCER_SOURCE_VERSION = '1.24.1';
/** Debian 12's package, 1.18. */
export const DEBIAN_PGBOUNCER = '/usr/sbin/pgbouncer';
const MIRROR = 'http://deb.debian.org/debian';

export const pgbouncerCache = (): string =>
  path.join(
    process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'),
    'social-posts',
    `pgbouncer-${PGBOUNCER_SOURCE_VERSION}`,
  );

const run = (command: string, args: string[], cwd?: string): string =>
  execFileSync(command, args, {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
  });

/** The first line of `pgbouncer --version`, e.g. "PgBouncer 1.24.1". */
export function pgbouncerVersion(binary: string): string {
  return run(binary, ['--version']).split('\n')[0]?.trim() ?? '';
}

/** Debian 12's PgBouncer, or an error saying what to install. */
export function debianPgBouncer(): string {
  if (!existsSync(DEBIAN_PGBOUNCER))
    throw new Error(`${DEBIAN_PGBOUNCER} is missing: apt-get install pgbouncer (Debian 12 ships 1.18)`);
  return DEBIAN_PGBOUNCER;
}

/** PgBouncer 1.24.1 from the cache, built first if it is not there yet. */
export function builtPgBouncer(): string {
  const binary = path.join(pgbouncerCache(), 'pgbouncer');
  if (existsSync(binary)) return binary;
  const work = mkdtempSync(path.join(os.tmpdir(), 'sp-pgbouncer-build-'));
  try {
    const apt = path.join(work, 'apt');
    mkdirSync(path.join(apt, 'lists', 'partial'), { recursive: true });
    mkdirSync(path.join(apt, 'cache', 'archives', 'partial'), { recursive: true });
    const sources = path.join(apt, 'sources.list');
    writeFileSync(sources, `deb-src ${MIRROR} trixie main\n`);
    const aptOptions = [
      '-o',
      `Dir::Etc::sourcelist=${sources}`,
      '-o',
      'Dir::Etc::sourceparts=-',
      '-o',
      `Dir::State::Lists=${path.join(apt, 'lists')}`,
      '-o',
      `Dir::Cache=${path.join(apt, 'cache')}`,
      '-o',
      'APT::Get::List-Cleanup=0',
    ];
    run('apt-get', [...aptOptions, '-qq', 'update']);
    const src = path.join(work, 'src');
    mkdirSync(src);
    // The upstream version is pinned (Debian's revision may move with security updates): another
    // one in the archive fails here instead of building silently.
    const debianVersion = run('apt-cache', [...aptOptions, 'showsrc', 'pgbouncer'])
      .split('\n')
      .map((line) => /^Version: (\S+)$/.exec(line)?.[1])
      .find((v) => v?.startsWith(`${PGBOUNCER_SOURCE_VERSION}-`));
    if (!debianVersion) throw new Error(`Debian 13 offers no pgbouncer ${PGBOUNCER_SOURCE_VERSION} source`);
    run('apt-get', [...aptOptions, '-qq', 'source', '--download-only', `pgbouncer=${debianVersion}`], src);
    const dsc = readdirSync(src).find((f) => f.endsWith('.dsc'));
    if (!dsc) throw new Error('apt-get source gave no .dsc');
    run('dpkg-source', ['-x', dsc, 'tree'], src);
    const tree = path.join(src, 'tree');
    run('./configure', ['--without-systemd'], tree);
    run('make', [`-j${String(os.cpus().length)}`], tree);
    const version = pgbouncerVersion(path.join(tree, 'pgbouncer'));
    if (version !== `PgBouncer ${PGBOUNCER_SOURCE_VERSION}`)
      throw new Error(`built ${version}, wanted ${PGBOUNCER_SOURCE_VERSION}`);
    // Written beside, then renamed: a build cut short never leaves a half binary in the cache.
    mkdirSync(pgbouncerCache(), { recursive: true });
    const staged = `${binary}.${String(process.pid)}`;
    copyFileSync(path.join(tree, 'pgbouncer'), staged);
    chmodSync(staged, 0o755);
    renameSync(staged, binary);
    return binary;
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr ?? '';
    throw new Error(`building PgBouncer ${PGBOUNCER_SOURCE_VERSION} failed: ${stderr.trim().slice(-2000)}`, {
      cause: error,
    });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The binary of one of the two PgBouncers. */
export const pgbouncerBinary = (version: '1.18' | '1.24'): string =>
  version === '1.18' ? debianPgBouncer() : builtPgBouncer();

if (require.main === module) {
  const started = Date.now();
  for (const binary of [debianPgBouncer(), builtPgBouncer()])
    process.stdout.write(`${binary}\t${pgbouncerVersion(binary)}\n`);
  process.stdout.write(`ready in ${String(Math.round((Date.now() - started) / 1000))} s\n`);
}
