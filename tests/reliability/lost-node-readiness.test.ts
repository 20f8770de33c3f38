import { call, replicatedBehindRelay, report } from './support';

/**
 * Readiness asks on a connection of its own, which sits idle between probes. When the primary's
 * node vanishes (that connection stalls: nothing answers, nothing closes) and the promoted standby
 * takes the address, the first probe after the move must find the new primary within its 1 s,
 * not spend it waiting on the dead connection and take every replica out of rotation.
 */
const { pair, relay, start } = replicatedBehindRelay();

async function probe(base: string): Promise<{ status: number; ms: number }> {
  const { status, ms } = await call(base, '/healthz/ready');
  return { status, ms: Math.round(ms) };
}

test("When the primary node vanishes while readiness's connection sits idle and a new primary takes the address, then the first probe after the move answers 200 within 1 s", async () => {
  const svc = await start(1500);
  expect((await probe(svc.base)).status).toBe(200);

  relay().stall();
  pair.promoteStandby();
  relay().retarget(pair.standbyPort);
  const first = await probe(svc.base);
  report('readiness after a lost node', first);

  expect(first.status).toBe(200);
  expect(first.ms).toBeLessThan(1000);
  expect(svc.child.exitCode).toBeNull();
});
