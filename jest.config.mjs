/**
 * Every jest suite of the project, one project each; a run names its own (the npm scripts do):
 * `npm test` the service, `chart:test` the chart, `test:reliability`, `test:browser`, and the
 * end-to-end suite `k8s` (run by k8s:local, k8s:kind and the e2e image, never by npm test).
 */
import { existsSync } from 'node:fs';
import path from 'node:path';

const root = import.meta.dirname;

const project = (name, folder, { testTimeout, ...options }) => ({
  displayName: name,
  preset: 'ts-jest',
  testEnvironment: 'node',
  rootDir: root,
  roots: [`<rootDir>/${folder}`],
  globals: { testTimeoutMs: testTimeout },
  setupFilesAfterEnv: ['<rootDir>/tools/harness/jest-timeout.ts'],
  ...options,
});

const projects = [
  // Each file builds the app in-process against a database of its own (tests/service/helpers.ts).
  // globalSetup makes the migrated embedded database once; each file opens a copy of it.
  project('service', 'tests/service', {
    testTimeout: 30_000,
    globalSetup: '<rootDir>/tests/service/global-setup.ts',
  }),
  // helm runs as a child process; a cold start of several renders in parallel takes a few seconds.
  project('chart', 'tests/chart', { testTimeout: 60_000 }),
  // The service as real processes against PostgreSQL; each case starts load of its own (--runInBand).
  project('reliability', 'tests/reliability', { testTimeout: 180_000 }),
  // Debian's Chromium driven by playwright-core against the service as its own process.
  project('browser', 'tests/browser', { testTimeout: 120_000 }),
  // npm run release against a real registry on the machine (docker-registry, skopeo, gpg, podman).
  project('release', 'tests/release', { testTimeout: 900_000 }),
  // Through the proxy (k8s-tests/README.md); its cases share one user and one rate-limit counter.
  project('k8s', 'k8s-tests', { testMatch: ['**/*.test.ts'], testTimeout: 60_000 }),
];

export default {
  // The e2e image holds k8s-tests/ alone of these folders: a project whose folder is absent is left out.
  projects: projects.filter((p) => existsSync(path.join(root, p.roots[0].replace('<rootDir>/', '')))),
  // Orders the end-to-end suite's files (upgrade first, backup last); the others keep jest's order.
  testSequencer: '<rootDir>/k8s-tests/sequencer.mjs',
};
