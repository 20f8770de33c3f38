/**
 * Browser tests: Debian's Chromium (/usr/bin/chromium) driven by playwright-core against the service
 * started as its own process. One file at a time: each runs a browser and a service.
 */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  rootDir: '..',
  roots: ['<rootDir>/browser-tests'],
  testTimeout: 120000,
  maxWorkers: 1,
};
