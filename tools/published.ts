/**
 * A release as an operator meets it: `npm run release` into a real registry on a local port
 * (registry.ts), signed with a throwaway key, and the chart pulled back with `helm pull --verify`.
 * The release test and k8s:local's install from the registry start from here.
 */
import { execFileSync, spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { startRegistry, type Registry } from './harness/registry';
import { repoRoot } from './node-release';
import { release, type ReleaseOptions, type ReleaseRecord } from './release';
import { ensureTools } from './tools';

export interface Published {
  registry: Registry;
  record: ReleaseRecord;
  /** The public half of the signing key, what an operator verifies the chart with. */
  pubring: string;
  /** The line at which a first release was killed, when it was (`publish`'s `interruptAt`). */
  interrupted?: string;
}

/** A signing key made for this run only, written as the legacy keyring files Helm reads. */
export function throwawayKey(work: string): { name: string; secring: string; pubring: string } {
  const gnupg = path.join(work, 'gnupg');
  mkdirSync(gnupg, { recursive: true, mode: 0o700 });
  const gpg = (args: string[]) =>
    execFileSync('gpg', ['--batch', '--pinentry-mode', 'loopback', '--passphrase', '', ...args], {
      env: { ...process.env, GNUPGHOME: gnupg },
    });
  const name = 'Release Test';
  gpg(['--quick-gen-key', `${name} <release@example.com>`, 'rsa2048', 'sign', 'never']);
  const secring = path.join(work, 'secring.gpg');
  const pubring = path.join(work, 'pubring.gpg');
  writeFileSync(secring, gpg(['--export-secret-keys']));
  writeFileSync(pubring, gpg(['--export']));
  return { name, secring, pubring };
}

/**
 * Cuts the release into a fresh registry; `image` is one built already (else the release builds it).
 * With `interruptAt`, a first release runs in processes of its own, all killed at once (as when the
 * machine goes down) when it logs a line starting so; the release then run again completes it.
 */
export async function publish(work: string, image?: string, interruptAt?: string): Promise<Published> {
  mkdirSync(work, { recursive: true });
  const key = throwawayKey(work);
  const registry = await startRegistry();
  const options: ReleaseOptions = {
    registry: `${registry.host}/social-posts`,
    key: key.name,
    keyring: key.secring,
    plainHttp: true,
    out: path.join(work, 'out'),
    // A throwaway release of the tree as it is, edits and all: nobody relies on its recorded commit.
    throwaway: true,
    ...(image ? { image } : {}),
  };
  try {
    const interrupted = interruptAt === undefined ? undefined : await killedAt(interruptAt, options);
    const record = await release(options);
    return { registry, record, pubring: key.pubring, ...(interrupted ? { interrupted } : {}) };
  } catch (error) {
    await registry.stop();
    throw error;
  }
}

/** The line a release in processes of its own logged when they were killed, all at once. */
async function killedAt(line: string, options: ReleaseOptions): Promise<string> {
  const scratch = path.join(options.out, 'killed-tmp');
  mkdirSync(scratch, { recursive: true });
  const child = spawn(
    path.join(repoRoot, 'node_modules', '.bin', 'tsx'),
    ['--eval', `require('./tools/release').release(JSON.parse(process.env.RELEASE_OPTIONS))`],
    // A group of its own, so that the kill reaches skopeo, helm and the rest with it.
    {
      cwd: repoRoot,
      detached: true,
      stdio: ['ignore', 'pipe', 'inherit'],
      // Its scratch folders in the test's own, which go with it: killed, it removes none.
      env: { ...process.env, RELEASE_OPTIONS: JSON.stringify(options), TMPDIR: scratch },
    },
  );
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const lines = createInterface({ input: child.stdout });
  for await (const logged of lines)
    if (logged.startsWith(line)) {
      // Its whole process group (podman, skopeo); without a pid there is no group to signal.
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      await exited;
      return logged;
    }
  await exited;
  throw new Error(`the release exited ${String(child.exitCode)} before it logged "${line}"`);
}

/** `helm pull oci://… --verify` of the published chart into a folder; the .tgz is `chartFile(…)`. */
export function pullChart(published: Published, into: string): SpawnSyncReturns<string> {
  mkdirSync(into, { recursive: true });
  return spawnSync(
    ensureTools().helm,
    [
      'pull',
      published.record.chart,
      '--version',
      published.record.chartVersion,
      '--verify',
      '--keyring',
      published.pubring,
      '--plain-http',
      '--destination',
      into,
    ],
    { encoding: 'utf8' },
  );
}

export const chartFile = (published: Published, folder: string): string =>
  path.join(folder, `social-posts-${published.record.chartVersion}.tgz`);
