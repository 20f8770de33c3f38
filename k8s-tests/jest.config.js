/** End-to-end suite through the ingress (k8s-tests/README.md); run by npm run k8s:local or k8s:kind, never by npm test. */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  rootDir: `${__dirname}/..`,
  roots: ['<rootDir>/k8s-tests'],
  testMatch: ['**/*.test.ts'],
  // The cases share one user and one rate-limit counter: one file, in order, one worker.
  maxWorkers: 1,
  testSequencer: '<rootDir>/k8s-tests/sequencer.mjs',
  testTimeout: 60000,
  verbose: true,
};
