/**
 * A real OCI registry on the machine: Debian's docker-registry (the CNCF distribution registry
 * 2.8) on a free local port, its storage in a temporary folder that goes with it. Plain HTTP on
 * 127.0.0.1 only: clients are told so (`--tls-verify=false`, `--plain-http`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sleep } from './client';
import { freePort } from './service';

export interface Registry {
  /** host:port */
  host: string;
  /** The folder the registry stores blobs and manifests in (a test alters them there). */
  storage: string;
  stop(): Promise<void>;
}

export async function startRegistry(
  binary = process.env['REGISTRY_BIN'] ?? '/usr/bin/docker-registry',
): Promise<Registry> {
  const folder = mkdtempSync(path.join(tmpdir(), 'social-posts-registry-'));
  const storage = path.join(folder, 'storage');
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const config = path.join(folder, 'config.yml');
  writeFileSync(
    config,
    [
      'version: 0.1',
      'log:',
      '  level: warn',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${storage}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: ${host}`,
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn(binary, ['serve', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let errors = '';
  child.stderr?.on('data', (chunk: Buffer) => (errors += chunk.toString()));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`docker-registry exited ${child.exitCode}: ${errors}`);
    try {
      const answer = await fetch(`http://${host}/v2/`);
      if (answer.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`docker-registry did not answer on ${host}: ${errors}`);
    await sleep(200);
  }
  return {
    host,
    storage,
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(folder, { recursive: true, force: true });
    },
  };
}
