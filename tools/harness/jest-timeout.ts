// Each project's time per test (jest.config.mjs, `globals.testTimeoutMs`): jest takes `testTimeout`
// from the run as a whole, never from a project.
jest.setTimeout((globalThis as { testTimeoutMs?: number }).testTimeoutMs ?? 5_000);
