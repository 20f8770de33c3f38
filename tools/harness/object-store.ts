/**
 * An S3-compatible object store on this machine for the backup drill: the npm package s3rver as its
 * own process, on a free port of 127.0.0.1, its objects in a temporary folder, one bucket made at
 * start. Its credentials are s3rver's fixed pair; they reach the barman tools by environment only.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stop, track, type Managed } from './processes';

/** The access key pair s3rver accepts (its defaults, lib/models/account.js of s3rver 3.7.1). */
const ACCESS_KEY = 'S3RVER';
const SECRET_KEY = 'S3RVER';
/** s3rver stores each object as `<key>._S3rver_object` beside its metadata files. */
const OBJECT_SUFFIX = '._S3rver_object';

export class ObjectStore {
  readonly dir = mkdtempSync(path.join(tmpdir(), 'sp-object-store-'));
  private server: Managed | undefined;
  endpointUrl = '';

  constructor(readonly bucket: string) {
    if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket))
      throw new Error(`not an S3 bucket name: ${bucket}`);
  }

  /** The environment a barman tool needs to reach the store (the credentials, never in a file). */
  get env(): Record<string, string> {
    return {
      AWS_ACCESS_KEY_ID: ACCESS_KEY,
      AWS_SECRET_ACCESS_KEY: SECRET_KEY,
      AWS_DEFAULT_REGION: 'us-east-1',
    };
  }

  /** Starts s3rver on `port` (0: one the kernel picks) and resolves with its endpoint once it listens. */
  async start(withinMs = 30_000, port = 0): Promise<string> {
    const bin = path.join(path.dirname(require.resolve('s3rver/package.json')), 'bin', 's3rver.js');
    const child = spawn(
      process.execPath,
      [
        bin,
        '-d',
        path.join(this.dir, 'objects'),
        '-a',
        '127.0.0.1',
        '-p',
        String(port),
        '--silent',
        '--configure-bucket',
        this.bucket,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const server = track('s3rver', child);
    this.server = server;
    let output = '';
    const listened = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`s3rver did not listen within ${String(withinMs)} ms: ${output}`));
      }, withinMs);
      const read = (chunk: Buffer) => {
        output += chunk.toString();
        const listening = /S3rver listening on [\d.]+:(\d+)/.exec(output);
        if (listening) {
          clearTimeout(timer);
          resolve(Number(listening[1]));
        }
      };
      child.stdout.on('data', read);
      child.stderr.on('data', read);
      void server.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`s3rver exited (${String(code)}): ${output}`));
      });
    });
    this.endpointUrl = `http://127.0.0.1:${String(listened)}`;
    return this.endpointUrl;
  }

  /** Bytes stored under a key prefix of the bucket (`<server>/base`, `<server>/wals`). */
  bytes(prefix: string): number {
    const root = path.join(this.dir, 'objects', this.bucket, prefix);
    try {
      return readdirSync(root, { recursive: true, withFileTypes: true })
        .filter((entry) => !entry.isDirectory() && entry.name.endsWith(OBJECT_SUFFIX))
        .reduce((total, entry) => total + statSync(path.join(entry.parentPath, entry.name)).size, 0);
    } catch {
      return 0;
    }
  }

  async destroy(): Promise<void> {
    if (this.server) await stop(this.server, 'SIGTERM', 5000);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
