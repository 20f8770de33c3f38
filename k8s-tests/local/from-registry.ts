/**
 * `k8s:local --from-registry`: the install an operator makes from a published release. The image
 * `npm run image:build` made is released into a registry on a local port (tools/published.ts),
 * the chart is pulled back with `helm pull --verify` and rendered from its package, and the image
 * its defaults name is pulled by digest: the replicas run what the registry served.
 */
import { join } from 'node:path';
import { engine, IMAGE, imageExists, run } from '../../tools/container';
import { chartFile, publish, pullChart } from '../../tools/published';
import type { Registry } from '../../tools/harness/registry';

export interface Installed {
  registry: Registry;
  /** The pulled chart package, to render instead of the checkout's folder. */
  chart: string;
}

export async function installFromRegistry(work: string, step: (message: string) => void): Promise<Installed> {
  if (!imageExists(IMAGE)) throw new Error(`no image ${IMAGE}: run npm run image:build first`);
  step(
    `release: ${IMAGE} released into docker-registry on a local port, the chart signed with a throwaway key`,
  );
  const published = await publish(join(work, 'release'), IMAGE);
  const { record } = published;
  step(`released: image ${record.image}@${record.imageDigest}, chart ${record.chart}@${record.chartDigest}`);
  const folder = join(work, 'pulled');
  const pulled = pullChart(published, folder);
  if (pulled.status !== 0) {
    await published.registry.stop();
    throw new Error(`helm pull --verify refused the published chart: ${pulled.stderr.trim()}`);
  }
  step(
    `chart pulled as an operator does: helm pull ${record.chart} --version ${record.chartVersion} --verify (${pulled.stdout.split('\n').find((line) => line.startsWith('Signed by')) ?? 'verified'})`,
  );
  return { registry: published.registry, chart: chartFile(published, folder) };
}

/** The rendered Deployment's image, pulled as the kubelet would (plain HTTP: the registry is local). */
export function pullImage(reference: string, step: (message: string) => void): void {
  if (!/@sha256:[0-9a-f]{64}$/.test(reference))
    throw new Error(`the pulled chart names ${reference}, not an image by digest`);
  run(['pull', ...(engine().name === 'podman' ? ['--tls-verify=false'] : []), reference], { quiet: true });
  step(`image pulled by digest: ${reference}`);
}
