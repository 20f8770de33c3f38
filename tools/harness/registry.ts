/**
 * A real OCI registry on the machine: Debian's docker-registry (the CNCF distribution registry
 * 2.8) on a free local port, its storage in a temporary folder that goes with it. Plain HTTP on
 * 127.0.0.1 only: clients are told so (`--tls-verify=false`, `--plain-http`). With `logins`, it
 * takes no request without one of them: by the password itself (`auth: 'basic'`, htpasswd, where
 * every login may push) or, as GHCR and Harbor do, by a token that a token server of the harness's
 * own grants for a login's password, holding only the actions that login may do (`auth: 'bearer'`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import bcrypt from 'bcrypt';
import { makeCa } from './certificates';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sleep } from './client';
import type { RegistryLogin, TokenServerConfig } from './registry-tokens';
import { freePort } from './service';

export interface Registry {
  /** host:port */
  host: string;
  /** The folder the registry stores blobs and manifests in (a test alters them there). */
  storage: string;
  stop(): Promise<void>;
}

const SERVICE = 'social-posts-tests';

/** The token server (registry-tokens.ts) as a process of its own; its realm and the CA the registry trusts. */
async function startTokenServer(
  folder: string,
  logins: RegistryLogin[],
): Promise<{ realm: string; cert: string; child: ChildProcess }> {
  const ca = makeCa(folder, 'token-ca', SERVICE);
  const config: TokenServerConfig = { service: SERVICE, key: ca.key, cert: ca.cert, logins };
  const file = path.join(folder, 'tokens.json');
  writeFileSync(file, JSON.stringify(config));
  const root = path.join(__dirname, '..', '..');
  const child = spawn(
    path.join(root, 'node_modules', '.bin', 'tsx'),
    [path.join(__dirname, 'registry-tokens.ts'), file],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(out.trim());
    });
    child.once('exit', (code) => {
      reject(new Error(`the token server exited ${String(code)}`));
    });
  });
  return { realm: `http://127.0.0.1:${port}/token`, cert: ca.cert, child };
}

export async function startRegistry(
  options: { logins?: RegistryLogin[]; auth?: 'basic' | 'bearer'; binary?: string } = {},
): Promise<Registry> {
  const binary = options.binary ?? process.env['REGISTRY_BIN'] ?? '/usr/bin/docker-registry';
  const folder = mkdtempSync(path.join(tmpdir(), 'social-posts-registry-'));
  const storage = path.join(folder, 'storage');
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const config = path.join(folder, 'config.yml');
  const logins = options.logins ?? [];
  let auth: string[] = [];
  let tokens: ChildProcess | undefined;
  if (logins.length > 0 && options.auth === 'bearer') {
    const server = await startTokenServer(folder, logins);
    tokens = server.child;
    auth = [
      'auth:',
      '  token:',
      `    realm: ${server.realm}`,
      `    service: ${SERVICE}`,
      `    issuer: ${SERVICE}`,
      `    rootcertbundle: ${server.cert}`,
    ];
  } else if (logins.length > 0) {
    const htpasswd = path.join(folder, 'htpasswd');
    // distribution reads bcrypt lines only.
    const lines = await Promise.all(
      logins.map(async (l) => `${l.username}:${await bcrypt.hash(l.password, 10)}\n`),
    );
    writeFileSync(htpasswd, lines.join(''));
    auth = ['auth:', '  htpasswd:', `    realm: ${SERVICE}`, `    path: ${htpasswd}`];
  }
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
      ...auth,
      'http:',
      `  addr: ${host}`,
      '',
    ].join('\n'),
  );
  // Its log goes to a file: a pipe fills while a test waits on a synchronous skopeo, and the
  // registry, blocked writing its log, then answers nothing, skopeo's request included.
  const log = path.join(folder, 'registry.log');
  const logFd = openSync(log, 'w');
  const child: ChildProcess = spawn(binary, ['serve', config], { stdio: ['ignore', 'ignore', logFd] });
  closeSync(logFd);
  const errors = () => readFileSync(log, 'utf8');
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) {
      tokens?.kill('SIGTERM');
      throw new Error(`docker-registry exited ${child.exitCode}: ${errors()}`);
    }
    try {
      // Up once it answers: served, or asked for a login when it takes none without one.
      const answer = await fetch(`http://${host}/v2/`);
      if (answer.status === (logins.length > 0 ? 401 : 200)) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGTERM');
      tokens?.kill('SIGTERM');
      throw new Error(`docker-registry did not answer on ${host}: ${errors()}`);
    }
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
      if (tokens && tokens.exitCode === null) {
        const exited = new Promise((resolve) => tokens.once('exit', resolve));
        tokens.kill('SIGTERM');
        await exited;
      }
      rmSync(folder, { recursive: true, force: true });
    },
  };
}
