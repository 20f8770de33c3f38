import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  changelogProblems,
  changeProblems,
  compareSemVer,
  inPlaceFrom,
  migrationsAt,
  parseChangelog,
  previousRelease,
  readReleases,
  recordedRelease,
  treeMigrations,
  treeVersions,
  upgradeSources,
  versionProblems,
} from '../../tools/harness/releases';
import { describeOnEmbedded } from './helpers';

// Files and git only: the embedded pass runs it, the PostgreSQL pass need not repeat it.
describeOnEmbedded('The releases of this tree', () => {
  it('When CHANGELOG.md is read, then it is in Keep a Changelog form: Unreleased first, releases newest first with ISO dates, a record line and an Upgrading subsection each', () => {
    expect(changelogProblems()).toEqual([]);
  });

  it('When the versions are read, then package.json, its lock file and Chart.yaml agree, and CHANGELOG.md records the current version as its newest release, with this chart', () => {
    expect(versionProblems()).toEqual([]);
  });

  it('When the service or the chart changed since the newest recorded release, then its version moved past that release', () => {
    expect(changeProblems()).toEqual([]);
  });

  it('When the upgrade suite asks for the previous release, then it gets a recorded one older than this tree', () => {
    const previous = previousRelease();
    expect(previous.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(compareSemVer(previous.version, treeVersions().app)).toBeLessThan(0);
    expect(readReleases()).toContainEqual(previous);
  });

  it('When the upgrade suite asks which releases to upgrade from, then it gets the previous one first and the oldest this one upgrades in place from last, each with the migrations its upgrade applies', () => {
    const sources = upgradeSources();
    expect(sources[0]?.release).toEqual(previousRelease());
    expect(sources.at(-1)?.release).toEqual(inPlaceFrom());
    for (const source of sources)
      expect(source.migrations).toEqual(
        treeMigrations().filter((name) => !migrationsAt(source.release.commit ?? '').includes(name)),
      );
  });

  it('When docs/operations.md says which releases this one upgrades in place from, then it names the oldest one CHANGELOG.md states', () => {
    const text = readFileSync(path.join(__dirname, '..', '..', 'docs', 'operations.md'), 'utf8');
    expect(text.replace(/\s+/g, ' ')).toContain(
      `${treeVersions().app} upgrades in place from ${inPlaceFrom().version} or any later release`,
    );
  });

  it("When docs/operations.md gives each release's last migration (for migrate down --to), then every recorded release has its row, with its chart and the last migration its commit ships", () => {
    const text = readFileSync(path.join(__dirname, '..', '..', 'docs', 'operations.md'), 'utf8');
    const rows = [...text.matchAll(/^\| (\S+) \| (\S+) \| `(\d+_\w+)` \|$/gm)].map(
      ([, version, chart, last]) => ({
        version,
        chart,
        last,
      }),
    );
    const recorded = readReleases().filter((release) => release.commit !== null);
    expect(rows).toEqual(
      recorded
        .map((release) => ({
          version: release.version,
          chart: release.chartVersion,
          last: migrationsAt(release.commit ?? '').at(-1),
        }))
        .reverse(),
    );
  });
});

// The checks above, run against small repositories of the same shape, so that each is seen to fail.
const scratchRoots: string[] = [];
afterAll(() => {
  for (const root of scratchRoots) rmSync(root, { recursive: true, force: true });
});

const GIT_CONFIG = ['user.name=Releases test', 'user.email=releases@example.invalid', 'commit.gpgsign=false'];

function git(root: string, ...args: string[]): string {
  const config = GIT_CONFIG.flatMap((setting) => ['-c', setting]);
  return execFileSync('git', ['-C', root, ...config, ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }).trim();
}

function write(root: string, file: string, text: string): void {
  mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
  writeFileSync(path.join(root, file), text);
}

function edit(root: string, file: string, change: (text: string) => string): void {
  const before = readFileSync(path.join(root, file), 'utf8');
  const after = change(before);
  if (after === before) throw new Error(`the edit left ${file} as it was`);
  writeFileSync(path.join(root, file), after);
}

/** One step of a table's change to a scratch repository. */
const editing = (file: string, change: (text: string) => string) => (root: string) => {
  edit(root, file, change);
};
const writing = (file: string, text: string) => (root: string) => {
  write(root, file, text);
};

function lockFile(version: string, runtimeVersion = '1.0.0', devVersion = '2.0.0'): string {
  const root = { name: 'app', version, dependencies: { lib: '^1.0.0' }, devDependencies: { tool: '^2.0.0' } };
  const packages = {
    '': root,
    'node_modules/lib': { version: runtimeVersion },
    'node_modules/tool': { version: devVersion, dev: true },
  };
  return `${JSON.stringify({ name: 'app', version, lockfileVersion: 3, requires: true, packages }, null, 2)}\n`;
}

const section = (version: string, date: string, chart: string, commit: string, upgrading = '- Nothing.') =>
  `## [${version}] - ${date}\n\nChart ${chart} · commit ${commit}\n\n### Added\n\n- It.\n\n### Upgrading\n\n${upgrading}\n`;

function scratchRoot(): string {
  const root = mkdtempSync(path.join(tmpdir(), 'releases-'));
  scratchRoots.push(root);
  return root;
}

let released: string | undefined;

/** A copy of a repository of this one's shape with release 1.0.0 (chart 0.2.0) cut and recorded. */
function releasedRepository(): string {
  released ??= makeReleasedRepository();
  const root = scratchRoot();
  cpSync(released, root, { recursive: true });
  return root;
}

function makeReleasedRepository(): string {
  const root = scratchRoot();
  const manifest = { name: 'app', version: '1.0.0', engines: { node: '>=20' } };
  const dependencies = { dependencies: { lib: '^1.0.0' }, devDependencies: { tool: '^2.0.0' } };
  const files = {
    'package.json': JSON.stringify({ ...manifest, ...dependencies }, null, 2),
    'package-lock.json': lockFile('1.0.0'),
    'tsconfig.json': JSON.stringify({ compilerOptions: { strict: true }, include: ['service'] }),
    'chart/Chart.yaml': 'apiVersion: v2\nname: app\n# the chart\nversion: 0.2.0\nappVersion: "1.0.0"\n',
    'chart/templates/deployment.yaml': 'kind: Deployment\n',
    'chart/README.md': '# app\n',
    'chart/test/render.test.ts': 'export {};\n',
    'service/src/main.ts': 'export {};\n',
    'README.md': '# app\n',
    'CHANGELOG.md': `# Changelog\n\n## [Unreleased]\n\n${section('1.0.0', '2026-11-25', '0.2.0', 'pending')}`,
  };
  for (const [file, text] of Object.entries(files)) write(root, file, text);
  git(root, 'init', '-q');
  git(root, 'add', '-A');
  git(root, 'commit', '-qm', 'Release 1.0.0');
  const commit = git(root, 'rev-parse', 'HEAD');
  edit(root, 'CHANGELOG.md', (text) => text.replace('commit pending', `commit ${commit}`));
  git(root, 'commit', '-qam', 'Record 1.0.0');
  return root;
}

const with110Section = (text: string) =>
  text.replace(
    '## [Unreleased]\n\n',
    `## [Unreleased]\n\n${section('1.1.0', '2026-11-26', '0.3.0', 'pending')}\n`,
  );

function setVersion(root: string, version: string): void {
  edit(root, 'package.json', (text) => text.replace(/"version": "[^"]+"/, `"version": "${version}"`));
}

/** Cuts release `version` in the scratch repository: its section, its release commit, then its record. */
function cutRelease(root: string, version: string, chart: string): void {
  setVersion(root, version);
  edit(root, 'CHANGELOG.md', (text) =>
    text.replace(
      '## [Unreleased]\n\n',
      `## [Unreleased]\n\n${section(version, '2026-11-26', chart, 'pending')}\n`,
    ),
  );
  git(root, 'add', '-A');
  git(root, 'commit', '-qm', `Release ${version}`);
  const commit = git(root, 'rev-parse', 'HEAD');
  edit(root, 'CHANGELOG.md', (text) => text.replace('commit pending', `commit ${commit}`));
  git(root, 'commit', '-qam', `Record ${version}`);
}

/** Prepares release 1.1.0 (chart 0.3.0) in the working tree, as its release commit would. */
function prepare110(root: string): void {
  edit(root, 'package.json', (text) => text.replace('"version": "1.0.0"', '"version": "1.1.0"'));
  write(root, 'package-lock.json', lockFile('1.1.0'));
  edit(root, 'chart/Chart.yaml', (text) => text.replace('0.2.0', '0.3.0').replace('"1.0.0"', '"1.1.0"'));
  edit(root, 'CHANGELOG.md', with110Section);
}

const allProblems = (root: string) => [
  ...changelogProblems(root),
  ...versionProblems(root),
  ...changeProblems(root),
];

describeOnEmbedded('The release checks on a repository of the same shape', () => {
  it('When nothing changed since the recorded release, then there is no problem', () => {
    expect(allProblems(releasedRepository())).toEqual([]);
  });

  it.each([
    ['a template changed', editing('chart/templates/deployment.yaml', (t) => `${t}# more\n`)],
    ['a values file was added', writing('chart/values-qa.yaml', 'replicas: 1\n')],
    [
      'Chart.yaml changed beyond its versions',
      editing('chart/Chart.yaml', (t) => t.replace('name: app', 'name: app2')),
    ],
  ])('When %s and the chart version did not move, then the chart check fails', (_what, change) => {
    const root = releasedRepository();
    change(root);
    expect(changeProblems(root)).toEqual([
      expect.stringMatching(/^the chart changed since 1\.0\.0 .* still 0\.2\.0/),
    ]);
  });

  it.each([
    ['the chart README', editing('chart/README.md', (t) => `${t}more\n`)],
    ['a chart test', editing('chart/test/render.test.ts', (t) => `${t}// more\n`)],
    [
      'a comment in Chart.yaml',
      editing('chart/Chart.yaml', (t) => t.replace('# the chart', '# the chart, said again')),
    ],
    ['a development dependency', writing('package-lock.json', lockFile('1.0.0', '1.0.0', '2.1.0'))],
    ['the root README', editing('README.md', (t) => `${t}more\n`)],
    [
      "tsconfig.json's file list",
      editing('tsconfig.json', (t) => t.replace('"service"', '"service","bench"')),
    ],
  ])('When only %s changed, then no version needs to move', (_what, change) => {
    const root = releasedRepository();
    change(root);
    expect(allProblems(root)).toEqual([]);
  });

  it.each([
    ['the service source changed', editing('service/src/main.ts', (t) => `${t}// more\n`)],
    ['a migration was added (untracked)', writing('migrations/0002_more.ts', 'export {};\n')],
    ['a runtime package in the lock changed', writing('package-lock.json', lockFile('1.0.0', '1.0.1'))],
    ["package.json's engines changed", editing('package.json', (t) => t.replace('>=20', '>=22'))],
    ["tsconfig.json's compiler options changed", editing('tsconfig.json', (t) => t.replace('true', 'false'))],
  ])(
    'When %s and the version did not move, then the service check fails; once 1.1.0 is prepared it passes',
    (_what, change) => {
      const root = releasedRepository();
      change(root);
      expect(changeProblems(root)).toEqual([
        expect.stringMatching(/^the service changed since 1\.0\.0 .* still 1\.0\.0/),
      ]);
      prepare110(root);
      expect(allProblems(root)).toEqual([]);
    },
  );

  it('When the tree states the oldest release it upgrades in place from, then the suite upgrades from the previous release and from each older one down to it that first shipped its migrations', () => {
    const root = releasedRepository();
    cutRelease(root, '1.0.1', '0.2.1');
    write(root, 'migrations/20260101000001_a.ts', 'export {};\n');
    cutRelease(root, '1.1.0', '0.3.0');
    // 1.2.0 in preparation, without a migration of its own.
    const promise = (upgrading: string) => {
      edit(root, 'CHANGELOG.md', (t) =>
        t.replace(/(## \[1\.2\.0\][^]*?### Upgrading\n\n).*\n/, `$1${upgrading}\n`),
      );
    };
    setVersion(root, '1.2.0');
    edit(root, 'CHANGELOG.md', (t) =>
      t.replace(
        '## [Unreleased]\n\n',
        `## [Unreleased]\n\n${section('1.2.0', '2026-11-27', '0.4.0', 'pending')}\n`,
      ),
    );
    const from = () => upgradeSources(root).map((s) => [s.release.version, s.why, s.migrations]);
    expect(from).toThrow('CHANGELOG.md\'s 1.2.0 does not state under Upgrading "- In place from X.Y.Z');

    promise('- In place from 1.0.0 or any later release.');
    // 1.0.1 ships 1.0.0's migrations, so its upgrade is 1.0.0's.
    expect(from()).toEqual([
      ['1.1.0', 'previous release', []],
      ['1.0.0', 'older release upgraded in place', ['20260101000001_a']],
    ]);
    promise('- In place from 1.0.1 or any later release: nothing is required.');
    expect(from()).toEqual([
      ['1.1.0', 'previous release', []],
      ['1.0.1', 'older release upgraded in place', ['20260101000001_a']],
    ]);
    promise('- In place from 1.1.0 or any later release.');
    expect(from()).toEqual([['1.1.0', 'previous release', []]]);
    write(root, 'migrations/20260102000002_b.ts', 'export {};\n');
    expect(from()).toEqual([['1.1.0', 'previous release', ['20260102000002_b']]]);
    promise('- In place from 1.0.0 or any later release.');
    expect(from()).toEqual([
      ['1.1.0', 'previous release', ['20260102000002_b']],
      ['1.0.0', 'older release upgraded in place', ['20260101000001_a', '20260102000002_b']],
    ]);

    promise('- In place from 0.9.0 or any later release.');
    expect(from).toThrow('no release 0.9.0 with a commit (recorded: 1.1.0, 1.0.1, 1.0.0)');
    expect(recordedRelease('1.0.1', root).commit).toMatch(/^[0-9a-f]{40}$/);
  });

  it("When the recorded release's commit is not in the clone, then the check says to fetch full history", () => {
    const root = releasedRepository();
    edit(root, 'CHANGELOG.md', (text) => text.replace(/commit [0-9a-f]{40}/, `commit ${'0'.repeat(40)}`));
    expect(changeProblems(root)).toEqual([expect.stringContaining('fetch full history')]);
    expect(versionProblems(root)).toEqual([expect.stringContaining('fetch full history')]);
  });

  it.each([
    [
      'appVersion differs from package.json',
      editing('chart/Chart.yaml', (t) => t.replace('"1.0.0"', '"1.0.1"')),
      /appVersion 1\.0\.1/,
    ],
    [
      "the lock file's root version differs",
      writing('package-lock.json', lockFile('1.0.1')),
      /package-lock\.json says 1\.0\.1/,
    ],
    [
      'the version is not SemVer',
      (root: string) => {
        edit(root, 'package.json', (t) => t.replace('"version": "1.0.0"', '"version": "1.1"'));
        write(root, 'package-lock.json', lockFile('1.1'));
        edit(root, 'chart/Chart.yaml', (t) => t.replace('"1.0.0"', '"1.1"'));
      },
      /1\.1 is not a semantic version/,
    ],
    [
      'the current version has no section',
      (root: string) => {
        prepare110(root);
        edit(root, 'CHANGELOG.md', (t) => t.replace(/## \[1\.1\.0\][^]*?(?=## \[1\.0\.0\])/, ''));
      },
      /no section for 1\.1\.0/,
    ],
    [
      'the current version is not the newest section',
      editing('CHANGELOG.md', with110Section),
      /newest section is 1\.1\.0, not 1\.0\.0/,
    ],
    [
      "the section's chart is not Chart.yaml's",
      (root: string) => {
        prepare110(root);
        edit(root, 'chart/Chart.yaml', (t) => t.replace('0.3.0', '0.4.0'));
      },
      /records chart 0\.3\.0 for 1\.1\.0, Chart\.yaml says 0\.4\.0/,
    ],
    [
      'the recorded commit carries other versions',
      (root: string) => {
        edit(root, 'package.json', (t) => t.replace('"version": "1.0.0"', '"version": "1.0.1"'));
        git(root, 'commit', '-qam', 'Not the release');
        edit(root, 'package.json', (t) => t.replace('"version": "1.0.1"', '"version": "1.0.0"'));
        edit(root, 'CHANGELOG.md', (t) =>
          t.replace(/commit [0-9a-f]{40}/, `commit ${git(root, 'rev-parse', 'HEAD')}`),
        );
      },
      /carries version 1\.0\.1 and chart 0\.2\.0, not 1\.0\.0 and 0\.2\.0/,
    ],
  ])('When %s, then the version check fails', (_what, change, problem) => {
    const root = releasedRepository();
    change(root);
    expect(versionProblems(root)).toContainEqual(expect.stringMatching(problem));
  });
});

describeOnEmbedded('The changelog form', () => {
  const good = `# Changelog\n\nPreamble.\n\n## [Unreleased]\n\n### Added\n\n- Soon.\n\n${section('1.1.0', '2026-11-26', '0.3.0', 'pending')}\n${section('1.0.0', '2026-11-25', '0.2.0', 'a'.repeat(40))}`;

  it('When the file is in form, then its releases are read newest first, pending without a commit, and the entries under Unreleased apart', () => {
    expect(parseChangelog(good)).toEqual({
      releases: [
        { version: '1.1.0', chartVersion: '0.3.0', commit: null, date: '2026-11-26', inPlaceFrom: null },
        {
          version: '1.0.0',
          chartVersion: '0.2.0',
          commit: 'a'.repeat(40),
          date: '2026-11-25',
          inPlaceFrom: null,
        },
      ],
      unreleased: ['- Soon.'],
      problems: [],
      unreadable: [],
    });
  });

  it.each([
    ['the title is missing', (t: string) => t.replace('# Changelog\n', ''), /first line/],
    [
      'Unreleased is not first',
      (t: string) =>
        t
          .replace('## [Unreleased]\n\n### Added\n\n- Soon.\n\n', '')
          .replace('## [1.0.0]', '## [Unreleased]\n\n## [1.0.0]'),
      /first section is not/,
    ],
    ['a date is not ISO', (t: string) => t.replace('2026-11-25', '25/11/2026'), /not an ISO date/],
    ['a date does not exist', (t: string) => t.replace('2026-11-25', '2026-02-30'), /not an ISO date/],
    [
      'a heading has no date',
      (t: string) => t.replace('## [1.0.0] - 2026-11-25', '## [1.0.0]'),
      /not a release heading/,
    ],
    [
      'releases are oldest first',
      (t: string) => t.replace('## [1.1.0]', '## [0.9.0]').replace('Chart 0.3.0', 'Chart 0.1.0'),
      /versions are not newest first/,
    ],
    [
      'the chart version did not move with a release',
      (t: string) => t.replace('Chart 0.3.0', 'Chart 0.2.0'),
      /chart 0\.2\.0 does not follow chart 0\.2\.0/,
    ],
    [
      'dates go backwards',
      (t: string) => t.replace('2026-11-26', '2026-11-24'),
      /dated 2026-11-24, before 2026-11-25/,
    ],
    [
      'a release has no Upgrading',
      (t: string) => t.replace(/(## \[1\.0\.0\][^]*?)### Upgrading\n\n- Nothing\.\n/, '$1'),
      /"## \[1\.0\.0\] - 2026-11-25" has no "### Upgrading"/,
    ],
    [
      'an Upgrading says nothing',
      (t: string) => t.replace(/(## \[1\.0\.0\][^]*?### Upgrading\n)\n- Nothing\.\n/, '$1'),
      /says nothing/,
    ],
    [
      'a release upgrades in place from one not before it',
      (t: string) => t.replace('- Nothing.', '- In place from 1.1.0 or any later release.'),
      /"## \[1\.1\.0\] - 2026-11-26": in place from 1\.1\.0, which does not come before 1\.1\.0/,
    ],
    [
      'a subsection is not one of the form',
      (t: string) => t.replace('### Added\n\n- It.', '### Notes\n\n- It.'),
      /subsection "Notes"/,
    ],
    [
      'a release has no record line',
      (t: string) => t.replace('Chart 0.2.0 · commit ', 'Chart 0.2.0, commit '),
      /record line/,
    ],
    ['a commit is abbreviated', (t: string) => t.replace('a'.repeat(40), 'a'.repeat(12)), /record line/],
    [
      'a pending release sits below a recorded one',
      (t: string) =>
        t
          .replace('commit pending', `commit ${'b'.repeat(40)}`)
          .replace(`commit ${'a'.repeat(40)}`, 'commit pending'),
      /1\.0\.0 is still pending below the recorded 1\.1\.0/,
    ],
  ])('When %s, then the form check fails', (_what, change, problem) => {
    const text = change(good);
    expect(text).not.toBe(good);
    expect(parseChangelog(text).problems).toContainEqual(expect.stringMatching(problem));
  });

  it('When versions carry pre-releases, then they are ordered by SemVer precedence', () => {
    const ordered = [
      '1.0.0-alpha',
      '1.0.0-alpha.1',
      '1.0.0-alpha.beta',
      '1.0.0-beta',
      '1.0.0-beta.2',
      '1.0.0-beta.11',
      '1.0.0-rc.1',
      '1.0.0',
      '1.0.1',
      '1.10.0',
      '2.0.0',
    ];
    for (let i = 1; i < ordered.length; i++) {
      expect(compareSemVer(ordered[i - 1] ?? '', ordered[i] ?? '')).toBe(-1);
      expect(compareSemVer(ordered[i] ?? '', ordered[i - 1] ?? '')).toBe(1);
    }
    expect(compareSemVer('1.0.0+build.1', '1.0.0')).toBe(0);
  });
});
