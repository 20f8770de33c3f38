/** The reliability suite: the service as real processes against PostgreSQL, one case at a time. */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  rootDir: '..',
  roots: ['<rootDir>/reliability'],
  // Cases start processes, databases and load of their own; running two at once would skew both.
  maxWorkers: 1,
  testTimeout: 180_000,
  verbose: true,
};
