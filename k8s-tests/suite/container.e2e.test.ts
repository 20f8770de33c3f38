/**
 * The API container as the rendered pod spec runs it, through the same driver as the
 * ingress suite: inside a running replica the service's user is the securityContext's, cannot
 * write outside the chart's writable mounts, holds no capability, cannot gain privileges, and
 * node is PID 1 (so the kubelet's SIGTERM reaches it; the rollout case shows the drain). The
 * expectations come from the rendered Deployment (K8S_EXPECT_*, set by the local runner; the
 * defaults are the chart's values). With `k8s:local --processes` there is no container, and
 * K8S_DRIVER=none cannot enter one: skipped.
 */
import { PROBED_FOLDERS, type Inspection } from './inspect';
import { driverFromEnv } from './drivers';

const driver = driverFromEnv();
const inContainers = process.env.K8S_RUNTIME !== 'processes';
const expected = {
  uid: Number(process.env.K8S_EXPECT_UID ?? 1000),
  gid: Number(process.env.K8S_EXPECT_GID ?? 1000),
  writable: (process.env.K8S_EXPECT_WRITABLE ?? '/tmp').split(',').filter(Boolean),
  readOnlyRoot: (process.env.K8S_EXPECT_READ_ONLY_ROOT ?? 'true') === 'true',
  memoryLimitBytes: process.env.K8S_EXPECT_MEMORY_LIMIT_BYTES,
};
const containerTest = inContainers && !driver.httpOnly ? test : test.skip;

containerTest(
  'When a replica is looked at from inside its container, then it runs as the securityContext user, writes only to the writable mounts, has no capabilities and node is PID 1 (case 8)',
  async () => {
    const seen = JSON.parse(await driver.inspectReplica()) as Inspection;
    expect({ uid: seen.uid, gid: seen.gid }).toEqual({ uid: expected.uid, gid: expected.gid });
    const writes = Object.fromEntries(
      PROBED_FOLDERS.map((folder) => [folder, expected.writable.includes(folder) ? 'ok' : 'refused']),
    );
    const refused = expected.readOnlyRoot ? ['EROFS', 'EACCES'] : ['EACCES'];
    expect(
      Object.fromEntries(
        Object.entries(seen.writes).map(([folder, result]) => [
          folder,
          result === 'ok' ? 'ok' : refused.includes(result) ? 'refused' : result,
        ]),
      ),
    ).toEqual(writes);
    // The root filesystem itself is read-only, not merely owned by another user.
    if (expected.readOnlyRoot) expect(seen.writes['/']).toBe('EROFS');
    // capabilities.drop [ALL]; allowPrivilegeEscalation false; RuntimeDefault seccomp (mode 2, filter).
    expect(seen.status).toEqual({
      CapEff: '0000000000000000',
      CapBnd: '0000000000000000',
      NoNewPrivs: '1',
      Seccomp: '2',
    });
    // exec form, no shell or npm in between: the container's SIGTERM goes to node itself.
    expect(seen.pid1).toBe('node dist/service/src/main.js');
    if (expected.memoryLimitBytes) expect(seen.memoryLimit).toBe(expected.memoryLimitBytes);
  },
);

containerTest(
  'When the image starts without DB_HOSTNAME, then it stops with a clear line: it holds no embedded database (case 9)',
  async () => {
    const { status, output } = JSON.parse(await driver.imageWithoutDatabase()) as {
      status: number | null;
      output: string;
    };
    expect(status).toBe(1);
    expect(output).toContain('DB_HOSTNAME is not set');
    expect(output).toContain('are not installed');
    expect(output).not.toContain('listening');
  },
);
