/** Service tests: each file builds the app in-process against a real database. */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/service/test'],
  testTimeout: 30000,
  // Files run in parallel workers; each one gets its own database (see service/test/helpers.ts).
  maxWorkers: 2,
};
