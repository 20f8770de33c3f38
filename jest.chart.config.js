/** Chart tests: render chart/ with helm (unpacked into .tools/) and assert on the objects; no cluster needed. */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/chart/test'],
  // helm runs as a child process; a cold start of several renders in parallel takes a few seconds.
  testTimeout: 60000,
};
