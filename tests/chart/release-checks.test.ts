/**
 * What rendering refuses so that an install cannot go out half-configured: prod's site values left
 * empty, and a startup probe too short for the pod's own database wait and migration budget.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import {
  apiContainer,
  chartDir,
  configMapData,
  environmentOptions,
  must,
  render,
  renderRefused,
  type RenderOptions,
} from './helm';

const prodAlone: RenderOptions = { ...environmentOptions('prod'), withoutSite: true };

describe("prod's placeholders", () => {
  it('When values-prod.yaml is read, then the bucket and the API server addresses are empty, not example values', () => {
    const values = parse(readFileSync(`${chartDir}/values-prod.yaml`, 'utf8')) as {
      backup: { objectStore: { destinationPath: string } };
      networkPolicy: { cnpg: { apiServer: { cidrs: string[] } } };
    };
    expect(values.backup.objectStore.destinationPath).toBe('');
    expect(values.networkPolicy.cnpg.apiServer.cidrs).toEqual([]);
  });

  it('When prod is rendered without a bucket, then rendering fails naming backup.objectStore.destinationPath', async () => {
    expect(
      await renderRefused({ ...prodAlone, set: { 'networkPolicy.cnpg.apiServer.cidrs[0]': '10.0.0.1/32' } }),
    ).toContain('backup.objectStore.destinationPath is required');
  });

  it("When prod is rendered without the API server's addresses, then rendering fails naming networkPolicy.cnpg.apiServer.cidrs", async () => {
    expect(
      await renderRefused({
        ...prodAlone,
        set: { 'backup.objectStore.destinationPath': 's3://bucket/prod' },
      }),
    ).toContain('networkPolicy.cnpg.apiServer.cidrs is required');
  });

  it('When prod is rendered with both set, then it renders with them', async () => {
    const objects = await render({
      ...prodAlone,
      set: {
        'backup.objectStore.destinationPath': 's3://bucket/prod',
        'networkPolicy.cnpg.apiServer.cidrs[0]': '10.0.0.1/32',
      },
    });
    expect(JSON.stringify(objects)).toContain('s3://bucket/prod');
    expect(JSON.stringify(objects)).toContain('10.0.0.1/32');
  });
});

describe("The startup probe's window against the worst start", () => {
  const dev = environmentOptions('dev');

  it('When the defaults are rendered, then the window (5 s x 75 = 375 s) covers the database wait plus the migration budget (120 s + 240 s)', async () => {
    const objects = await render(dev);
    const startup = must(apiContainer(objects).startupProbe, 'startupProbe');
    expect((startup.periodSeconds ?? 0) * (startup.failureThreshold ?? 0)).toBe(375);
    const config = configMapData(objects);
    expect(Number(config['DB_STARTUP_WAIT_SECONDS']) + Number(config['DB_MIGRATION_TIMEOUT_MS']) / 1000).toBe(
      360,
    );
  });

  it('When the window is one period short of the worst start, then rendering fails saying the threshold that fits', async () => {
    const message = await renderRefused({ ...dev, set: { 'startupProbe.failureThreshold': '71' } });
    expect(message).toContain('startupProbe allows 355 s');
    expect(message).toContain('= 360 s');
    expect(message).toContain('raise startupProbe.failureThreshold to at least 72');
    expect((await render({ ...dev, set: { 'startupProbe.failureThreshold': '72' } })).length).toBeGreaterThan(
      0,
    );
  });

  it('When the migration budget grows past the window, then rendering fails; an initial delay counts toward the window', async () => {
    expect(await renderRefused({ ...dev, set: { 'database.migrationTimeoutMs': '300000' } })).toContain(
      'a start may take database.startupWaitSeconds + database.migrationTimeoutMs = 420 s',
    );
    const objects = await render({
      ...dev,
      set: { 'database.migrationTimeoutMs': '300000', 'startupProbe.initialDelaySeconds': '45' },
    });
    expect(apiContainer(objects).startupProbe?.initialDelaySeconds).toBe(45);
  });
});
