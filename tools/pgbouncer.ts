/**
 * `npx tsx tools/pgbouncer.ts`: the two real PgBouncers the reliability suite and the bench run, their
 * paths one a line on stdout: Debian 12's package (no prepared-statement tracking) and the pinned
 * release built from Debian 13's source package (tracks named statements), cached outside the
 * checkout so a fresh clone on the same machine reuses it. The source comes through a private apt
 * configuration from the mirror the machine's own sources name, which are never touched; the
 * build's missing Debian packages are named before building.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const PGBOUNCER_SOURCE_VERSION = '1.24.1';
/** Debian 12's package, 1.18. */
const DEBIAN_PGBOUNCER = '/usr/sbin/pgbouncer';

/**
 * The Debian mirror the machine's apt sources use (a sandbox or a company network may reach only
 * that one), else deb.debian.org. Reads deb822 `URIs:` and one-line `deb` entries alike; the
 * security archive (`…/debian-security`) is not a mirror of the main one and is skipped.
 */
function debianMirror(): string {
  const folder = '/etc/apt/sources.list.d';
  const files = [
    '/etc/apt/sources.list',
    ...(existsSync(folder) ? readdirSync(folder).map((f) => path.join(folder, f)) : []),
  ];
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    const uri = /^(?:URIs:|deb(?:-src)?(?:\s+\[[^\]]*\])?)\s+(https?:\/\/\S+\/debian)\/?(?:\s|$)/m.exec(
      text,
    )?.[1];
    if (uri) return uri;
  }
  return 'http://deb.debian.org/debian';
}

const succeeds = (command: string, args: string[]): boolean =>
  spawnSync(command, args, { stdio: 'ignore' }).status === 0;

/** The Debian packages the build still needs, by what their absence would break. */
function missingBuildPackages(): string[] {
  const missing = [
    ...(succeeds('dpkg-source', ['--version']) ? [] : ['dpkg-dev']),
    ...(succeeds('make', ['--version']) ? [] : ['make']),
    ...(succeeds('cc', ['--version']) ? [] : ['gcc']),
  ];
  if (!succeeds('pkg-config', ['--version'])) return [...missing, 'pkg-config'];
  // configure finds the libraries through pkg-config.
  const libraries: [string, string][] = [
    ['libevent', 'libevent-dev'],
    ['openssl', 'libssl-dev'],
    ['libcares', 'libc-ares-dev'],
  ];
  return [
    ...missing,
    ...libraries.filter(([m]) => !succeeds('pkg-config', ['--exists', m])).map(([, p]) => p),
  ];
}

const pgbouncerCache = (): string =>
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
function debianPgBouncer(): string {
  if (!existsSync(DEBIAN_PGBOUNCER))
    throw new Error(`${DEBIAN_PGBOUNCER} is missing: apt-get install pgbouncer (Debian 12 ships 1.18)`);
  // Another release's package would be tested under 1.18's name.
  const version = pgbouncerVersion(DEBIAN_PGBOUNCER);
  if (!version.startsWith('PgBouncer 1.18.'))
    throw new Error(`${DEBIAN_PGBOUNCER} is ${version}, not Debian 12's 1.18`);
  return DEBIAN_PGBOUNCER;
}

/** PgBouncer 1.24.1 from the cache, built first if it is not there yet. */
function builtPgBouncer(): string {
  const binary = path.join(pgbouncerCache(), 'pgbouncer');
  if (existsSync(binary)) return binary;
  const missing = missingBuildPackages();
  if (missing.length > 0)
    throw new Error(
      `building PgBouncer ${PGBOUNCER_SOURCE_VERSION} needs: apt-get install ${missing.join(' ')}`,
    );
  const work = mkdtempSync(path.join(os.tmpdir(), 'sp-pgbouncer-build-'));
  try {
    const apt = path.join(work, 'apt');
    mkdirSync(path.join(apt, 'lists', 'partial'), { recursive: true });
    mkdirSync(path.join(apt, 'cache', 'archives', 'partial'), { recursive: true });
    const sources = path.join(apt, 'sources.list');
    writeFileSync(sources, `deb-src ${debianMirror()} trixie main\n`);
    const aptOptions = [
      `Dir::Etc::sourcelist=${sources}`,
      'Dir::Etc::sourceparts=-',
      `Dir::State::Lists=${path.join(apt, 'lists')}`,
      `Dir::Cache=${path.join(apt, 'cache')}`,
      'APT::Get::List-Cleanup=0',
    ].flatMap((option) => ['-o', option]);
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
  try {
    for (const binary of [debianPgBouncer(), builtPgBouncer()]) {
      process.stdout.write(`${binary}\n`);
      process.stderr.write(`${pgbouncerVersion(binary)}: ${binary}\n`);
    }
    process.stderr.write(`ready in ${String(Math.round((Date.now() - started) / 1000))} s\n`);
  } catch (error) {
    // What is missing, not a stack trace.
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  }
}
