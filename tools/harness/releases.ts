/**
 * The releases recorded in CHANGELOG.md, and the checks that keep them true: versions in SemVer
 * and in step (package.json, its lock file, Chart.yaml), the changelog in Keep a Changelog form,
 * and a new version wherever the service or the chart changed since the last recorded release.
 * The record lives in the file, not in git tags, because a clone may arrive without tags.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import semver from 'semver';
import { parse as parseYaml } from 'yaml';
import { ROOT } from './service';

export interface Release {
  version: string;
  chartVersion: string;
  /** The commit the release was cut from; null while it is being prepared (`commit pending`). */
  commit: string | null;
  date: string | null;
  /** The oldest release it upgrades in place from, as its Upgrading part states; null where it states none. */
  inPlaceFrom: string | null;
}

export interface ParsedChangelog {
  /** Newest first, Unreleased excluded. */
  releases: Release[];
  /** The entries listed under Unreleased: changes in the tree that no release names yet. */
  unreleased: string[];
  /** What keeps the file from Keep a Changelog form or from these rules, one sentence each. */
  problems: string[];
  /** Those of the problems that leave a release's record unreadable (also in `problems`). */
  unreadable: string[];
}

const RELEASE_HEADING = /^## \[([^\]]+)\] - (\S+)$/;
const RECORD_LINE = /^Chart (\S+) · commit ([0-9a-f]{40}|pending)$/;
/** The line of a release's Upgrading part that states the oldest release it upgrades in place from. */
const IN_PLACE_LINE = /^- In place from (\S+) or any later release\b/;
const SUBSECTIONS = ['Added', 'Changed', 'Deprecated', 'Removed', 'Fixed', 'Security', 'Upgrading'];

/** A SemVer 2.0.0 version written exactly (no leading "v" or "=", no spaces), build metadata allowed. */
function isSemVer(version: string): boolean {
  const parsed = semver.parse(version);
  if (parsed === null) return false;
  const build = parsed.build.length > 0 ? `+${parsed.build.join('.')}` : '';
  return `${parsed.version}${build}` === version;
}

/** SemVer 2.0.0 precedence: negative when a comes first, 0 when equal (build metadata ignored). */
export function compareSemVer(a: string, b: string): number {
  for (const version of [a, b]) if (!isSemVer(version)) throw new Error(`not a semantic version: ${version}`);
  return semver.compare(a, b);
}

/** Whether `a` fails to come after `b`, both SemVer (false when either is not: that has a problem of its own). */
const notAfter = (a: string, b: string): boolean => isSemVer(a) && isSemVer(b) && semver.compare(a, b) <= 0;

function isIsoDate(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) return false;
  const date = new Date(`${text}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().startsWith(text);
}

/** `lines` cut at each line starting with `prefix`: that line, and the lines up to the next such one. */
function headedParts(lines: string[], prefix: string): { heading: string; body: string[] }[] {
  const parts: { heading: string; body: string[] }[] = [];
  for (const line of lines) {
    if (line.startsWith(prefix)) parts.push({ heading: line, body: [] });
    else parts.at(-1)?.body.push(line);
  }
  return parts;
}

/** Reads a changelog's text: its releases, and every way it departs from the form. */
export function parseChangelog(text: string): ParsedChangelog {
  const problems: string[] = [];
  const unreadable: string[] = [];
  const cannotRead = (problem: string) => {
    problems.push(problem);
    unreadable.push(problem);
  };
  const lines = text.split('\n');
  if (lines[0] !== '# Changelog') problems.push('the first line is not "# Changelog"');

  // What precedes the first section is the preamble.
  const sections = headedParts(lines, '## ');
  if (sections[0]?.heading !== '## [Unreleased]') problems.push('the first section is not "## [Unreleased]"');

  const releases: Release[] = [];
  const unreleased: string[] = [];
  sections.forEach(({ heading, body }, index) => {
    const subsections = headedParts(body, '### ');
    for (const name of subsections.map((part) => part.heading.slice(4)))
      if (!SUBSECTIONS.includes(name))
        problems.push(`"${heading}" has a subsection "${name}" (allowed: ${SUBSECTIONS.join(', ')})`);
    if (index === 0 && heading === '## [Unreleased]') {
      unreleased.push(...body.filter((line) => line.startsWith('- ')));
      return;
    }

    const match = RELEASE_HEADING.exec(heading);
    if (!match) {
      cannotRead(`"${heading}" is not a release heading "## [X.Y.Z] - YYYY-MM-DD"`);
      return;
    }
    const [, version = '', date = ''] = match;
    if (!isSemVer(version)) cannotRead(`"${heading}": ${version} is not a semantic version`);
    if (!isIsoDate(date)) problems.push(`"${heading}": ${date} is not an ISO date (YYYY-MM-DD)`);
    const firstLine = body.find((line) => line.trim() !== '') ?? '';
    const record = RECORD_LINE.exec(firstLine);
    if (!record) {
      cannotRead(
        `"${heading}" does not begin with its record line "Chart X.Y.Z · commit <40-hex commit or pending>"`,
      );
      return;
    }
    const [, chartVersion = '', commit = ''] = record;
    if (!isSemVer(chartVersion)) cannotRead(`"${heading}": chart ${chartVersion} is not a semantic version`);
    const upgrading = subsections.find((part) => part.heading === '### Upgrading');
    if (!upgrading) problems.push(`"${heading}" has no "### Upgrading" subsection`);
    else if (upgrading.body.join('').trim() === '')
      problems.push(`"${heading}": its "### Upgrading" says nothing (write "Nothing." when so)`);
    // The part's first line, where the changelog's header says it stands.
    const first = upgrading?.body.find((line) => line.trim() !== '') ?? '';
    const inPlaceFrom = IN_PLACE_LINE.exec(first)?.[1] ?? null;
    if (inPlaceFrom !== null && !isSemVer(inPlaceFrom))
      problems.push(`"${heading}": in place from ${inPlaceFrom}, which is not a semantic version`);
    else if (inPlaceFrom !== null && notAfter(version, inPlaceFrom))
      problems.push(`"${heading}": in place from ${inPlaceFrom}, which does not come before ${version}`);
    releases.push({ version, chartVersion, commit: commit === 'pending' ? null : commit, date, inPlaceFrom });
  });

  // Newest first: each release after its predecessor in versions, chart versions and dates.
  releases.forEach((release, index) => {
    const older = releases[index + 1];
    if (!older) return;
    const pair = `${release.version} above ${older.version}`;
    if (notAfter(release.version, older.version)) problems.push(`${pair}: versions are not newest first`);
    if (notAfter(release.chartVersion, older.chartVersion))
      problems.push(
        `${pair}: chart ${release.chartVersion} does not follow chart ${older.chartVersion} (each release ships a chart of its own: appVersion is part of it)`,
      );
    if (release.date !== null && older.date !== null && release.date < older.date)
      problems.push(`${pair}: dated ${release.date}, before ${older.date}`);
    if (release.commit !== null && older.commit === null)
      problems.push(`${older.version} is still pending below the recorded ${release.version}`);
  });
  return { releases, unreleased, problems, unreadable };
}

function readText(root: string, file: string): string {
  return readFileSync(path.join(root, file), 'utf8');
}

/** The releases recorded in CHANGELOG.md, newest first; throws when a record cannot be read. */
export function readReleases(root: string = ROOT): Release[] {
  const { releases, unreadable } = parseChangelog(readText(root, 'CHANGELOG.md'));
  if (unreadable.length > 0) throw new Error(`CHANGELOG.md: ${unreadable.join('; ')}`);
  return releases;
}

/** The newest release with a recorded commit that is not the version this tree carries. */
export function previousRelease(root: string = ROOT): Release {
  const current = packageJson(root).version;
  const previous = readReleases(root).find(
    (release) => release.commit !== null && release.version !== current,
  );
  if (!previous) throw new Error(`CHANGELOG.md records no release before ${String(current)} with a commit`);
  return previous;
}

/** A recorded release by its version; throws naming the ones there are when it has no commit recorded. */
export function recordedRelease(version: string, root: string = ROOT): Release {
  const recorded = readReleases(root).filter((release) => release.commit !== null);
  const found = recorded.find((release) => release.version === version);
  if (!found)
    throw new Error(
      `CHANGELOG.md records no release ${version} with a commit (recorded: ${recorded.map((r) => r.version).join(', ')})`,
    );
  return found;
}

/** A migration's file name: the ones migrations/index.ts lists, without the index itself. */
const MIGRATION_FILE = /^(\d+_\w+)\.ts$/;

const migrationNames = (files: string[]): string[] =>
  files.flatMap((file) => MIGRATION_FILE.exec(path.basename(file))?.[1] ?? []).sort();

/** The migrations a commit ships, by name. */
export function migrationsAt(commit: string, root: string = ROOT): string[] {
  return migrationNames(git(root, ['ls-tree', '--name-only', commit, 'migrations/']).split('\n'));
}

/** The migrations this tree ships, by name. */
export function treeMigrations(root: string = ROOT): string[] {
  const folder = path.join(root, 'migrations');
  return existsSync(folder) ? migrationNames(readdirSync(folder)) : [];
}

export interface UpgradeSource {
  release: Release;
  /** This tree's migrations the release does not have: what the upgrade from it applies. */
  migrations: string[];
  /** Why the suite upgrades from it. */
  why: 'previous release' | 'older release upgraded in place';
}

/** The oldest release this tree upgrades in place from, as its CHANGELOG.md section states. */
export function inPlaceFrom(root: string = ROOT): Release {
  const current = String(packageJson(root).version);
  const own = readReleases(root).find((release) => release.version === current);
  if (!own?.inPlaceFrom)
    throw new Error(
      `CHANGELOG.md's ${current} does not state under Upgrading "- In place from X.Y.Z or any later release"`,
    );
  return recordedRelease(own.inPlaceFrom, root);
}

/**
 * The releases the upgrade suite upgrades from, newest first: the previous release, as a rolling
 * upgrade by one release does, and every older release this tree promises to upgrade in place from
 * that is the first to ship its set of migrations (a later one with the same set migrates the same way).
 */
export function upgradeSources(root: string = ROOT): UpgradeSource[] {
  const tree = treeMigrations(root);
  const differing = (release: Release): string[] => {
    const theirs = new Set(migrationsAt(release.commit as string, root));
    return tree.filter((name) => !theirs.has(name));
  };
  const previous = previousRelease(root);
  const oldest = inPlaceFrom(root);
  const sources: UpgradeSource[] = [
    { release: previous, migrations: differing(previous), why: 'previous release' },
  ];
  // Oldest first, so that of the releases with one set of migrations the first to ship it is kept.
  const older = readReleases(root)
    .filter(
      (release) =>
        release.commit !== null &&
        compareSemVer(release.version, previous.version) < 0 &&
        compareSemVer(release.version, oldest.version) >= 0,
    )
    .reverse();
  for (const release of older) {
    const migrations = differing(release);
    if (!sources.some((source) => isDeepStrictEqual(source.migrations, migrations)))
      sources.splice(1, 0, { release, migrations, why: 'older release upgraded in place' });
  }
  return sources;
}

interface PackageJson {
  version?: string;
  [key: string]: unknown;
}

interface LockFile {
  version?: string;
  packages?: Record<string, { version?: string; dev?: boolean; [key: string]: unknown }>;
}

function packageJson(root: string): PackageJson {
  return JSON.parse(readText(root, 'package.json')) as PackageJson;
}

function chartYaml(text: string): Record<string, unknown> {
  return parseYaml(text) as Record<string, unknown>;
}

function git(root: string, args: string[]): string {
  return execFileSync('git', ['-C', root, ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
  });
}

export function hasCommit(commit: string, root: string = ROOT): boolean {
  try {
    git(root, ['cat-file', '-e', `${commit}^{commit}`]);
    return true;
  } catch {
    return false;
  }
}

/** A file as the commit has it; null when it did not exist there. */
function atCommit(root: string, commit: string, file: string): string | null {
  try {
    return git(root, ['show', `${commit}:${file}`]);
  } catch {
    return null;
  }
}

/** Paths that differ between the commit and the working tree (untracked files included). */
function changedPaths(root: string, commit: string, pathspecs: string[]): string[] {
  const tracked = git(root, ['diff', '--name-only', commit, '--', ...pathspecs]);
  const untracked = git(root, ['ls-files', '--others', '--exclude-standard', '--', ...pathspecs]);
  return [...new Set(`${tracked}\n${untracked}`.split('\n').filter(Boolean))].sort();
}

function parsedAt<T>(root: string, commit: string, file: string, parse: (text: string) => T): T | null {
  const text = atCommit(root, commit, file);
  return text === null ? null : parse(text);
}

/** Whether `part` of `file` as `parse` reads it (null where missing) differs between the commit and the tree. */
function partChanged<T>(
  root: string,
  commit: string,
  file: string,
  parse: (text: string) => T,
  part: (parsed: T | null) => unknown,
): boolean {
  return !isDeepStrictEqual(part(parsedAt(root, commit, file, parse)), part(parse(readText(root, file))));
}

function without(object: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(object).filter(([key]) => !keys.includes(key)));
}

/** What the image is built from, beyond these files: the runtime part of package.json and the lock. */
const APP_PATHS = ['service/src', 'migrations', 'Dockerfile', 'tsconfig.build.json'];
const APP_PACKAGE_FIELDS = ['dependencies', 'optionalDependencies', 'engines'];

/** The lock's packages the image can install: development-only entries and the root's own version and dev list left out. */
function runtimeLock(lock: LockFile | null): unknown {
  if (!lock?.packages) return null;
  return Object.fromEntries(
    Object.entries(lock.packages)
      .filter(([, entry]) => entry.dev !== true)
      .map(([name, entry]) =>
        name === '' ? [name, without(entry, ['version', 'devDependencies'])] : [name, entry],
      ),
  );
}

/** How the service changed between the commit and the working tree: paths, or the file and part. */
function appChanges(commit: string, root: string = ROOT): string[] {
  const changes = changedPaths(root, commit, APP_PATHS);
  const pick = (json: PackageJson | null) =>
    Object.fromEntries(APP_PACKAGE_FIELDS.map((field) => [field, json?.[field] ?? null]));
  if (partChanged(root, commit, 'package.json', JSON.parse, pick))
    changes.push(`package.json (${APP_PACKAGE_FIELDS.join(', ')})`);
  if (partChanged(root, commit, 'package-lock.json', JSON.parse, runtimeLock))
    changes.push('package-lock.json (packages outside development)');
  const compilerOptions = (json: { compilerOptions?: unknown } | null) =>
    json === null ? null : json.compilerOptions;
  if (partChanged(root, commit, 'tsconfig.json', JSON.parse, compilerOptions))
    changes.push('tsconfig.json (compilerOptions)');
  return changes;
}

/** Chart.yaml without the two versions a release moves. */
function chartIdentity(chart: Record<string, unknown> | null): unknown {
  return chart && without(chart, ['version', 'appVersion']);
}

/** How the chart changed between the commit and the working tree (its tests, CI values and README aside). */
function chartChanges(commit: string, root: string = ROOT): string[] {
  const changes = changedPaths(root, commit, [
    'chart',
    // Where the chart's tests lived up to 1.1.0 (tests/chart/ since): a commit before that has them.
    ':(exclude)chart/test',
    ':(exclude)chart/ci',
    ':(exclude)chart/README.md',
    ':(exclude)chart/Chart.yaml',
  ]);
  if (partChanged(root, commit, 'chart/Chart.yaml', chartYaml, chartIdentity))
    changes.push('chart/Chart.yaml (beyond version and appVersion)');
  return changes;
}

export interface TreeVersions {
  app: string;
  lock: string;
  lockRoot: string;
  chart: string;
  appVersion: string;
}

export function treeVersions(root: string = ROOT): TreeVersions {
  const lock = JSON.parse(readText(root, 'package-lock.json')) as LockFile;
  const chart = chartYaml(readText(root, 'chart/Chart.yaml'));
  return {
    app: String(packageJson(root).version),
    lock: String(lock.version),
    lockRoot: String(lock.packages?.['']?.version),
    chart: String(chart['version']),
    appVersion: String(chart['appVersion']),
  };
}

/** The tree's versions against each other and against the changelog's newest release. */
export function versionProblems(root: string = ROOT): string[] {
  const problems: string[] = [];
  const versions = treeVersions(root);
  if (!isSemVer(versions.app))
    problems.push(`package.json version ${versions.app} is not a semantic version`);
  if (!isSemVer(versions.chart))
    problems.push(`chart/Chart.yaml version ${versions.chart} is not a semantic version`);
  if (versions.appVersion !== versions.app)
    problems.push(`chart/Chart.yaml appVersion ${versions.appVersion} is not package.json's ${versions.app}`);
  if (versions.lock !== versions.app || versions.lockRoot !== versions.app)
    problems.push(
      `package-lock.json says ${versions.lock} (root package ${versions.lockRoot}), package.json ${versions.app}: run npm install --package-lock-only`,
    );

  const { releases } = parseChangelog(readText(root, 'CHANGELOG.md'));
  const newest = releases[0];
  if (!releases.some((release) => release.version === versions.app))
    problems.push(`CHANGELOG.md has no section for ${versions.app}, the version in package.json`);
  else if (newest?.version !== versions.app)
    problems.push(`CHANGELOG.md's newest section is ${String(newest?.version)}, not ${versions.app}`);
  else if (newest.chartVersion !== versions.chart)
    problems.push(
      `CHANGELOG.md records chart ${newest.chartVersion} for ${versions.app}, Chart.yaml says ${versions.chart}`,
    );

  for (const release of releases) {
    if (release.commit === null) continue;
    if (!hasCommit(release.commit, root)) {
      problems.push(missingCommit(release));
      continue;
    }
    const app = parsedAt(root, release.commit, 'package.json', (text) => JSON.parse(text) as PackageJson);
    const chart = parsedAt(root, release.commit, 'chart/Chart.yaml', chartYaml);
    if (app?.version !== release.version || chart?.['version'] !== release.chartVersion)
      problems.push(
        `${release.version}'s commit ${release.commit} carries version ${String(app?.version)} and chart ${String(chart?.['version'])}, not ${release.version} and ${release.chartVersion}`,
      );
  }
  return problems;
}

function missingCommit(release: Release): string {
  return `${release.version}'s commit ${String(release.commit)} is not in this clone: fetch full history (git fetch --unshallow, or a CI checkout with fetch-depth 0)`;
}

/** Service or chart changes since the newest recorded release that did not move their version past it. */
export function changeProblems(root: string = ROOT): string[] {
  const base = readReleases(root).find((release) => release.commit !== null);
  if (!base?.commit) return [];
  if (!hasCommit(base.commit, root)) return [missingCommit(base)];
  const problems: string[] = [];
  const versions = treeVersions(root);
  const since = `since ${base.version} (chart ${base.chartVersion}, commit ${base.commit.slice(0, 12)})`;
  const app = appChanges(base.commit, root);
  if (app.length > 0 && notAfter(versions.app, base.version))
    problems.push(
      `the service changed ${since} but package.json is still ${versions.app}: bump it and add its CHANGELOG.md section (${app.slice(0, 5).join(', ')})`,
    );
  const chart = chartChanges(base.commit, root);
  if (chart.length > 0 && notAfter(versions.chart, base.chartVersion))
    problems.push(
      `the chart changed ${since} but Chart.yaml is still ${versions.chart}: bump it and record it in CHANGELOG.md (${chart.slice(0, 5).join(', ')})`,
    );
  return problems;
}

export function changelogProblems(root: string = ROOT): string[] {
  const file = path.join(root, 'CHANGELOG.md');
  return existsSync(file) ? parseChangelog(readFileSync(file, 'utf8')).problems : ['CHANGELOG.md is missing'];
}
