/**
 * Debian's nginx as the emulated ingress controller: its own prefix, pid, logs and temporary files
 * in a temporary folder, in the foreground (the runner owns its pid), as the unprivileged nobody
 * user on a high port. A new configuration is a reload (SIGHUP), confirmed by the generation the
 * new workers answer on a side port.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startLogged, stop, type Managed } from '../../tools/harness/processes';
import { probe, waitFor } from '../../tools/harness/poll';
import { BrokenEndpoint } from './broken-endpoint';

const NGINX = process.env.NGINX_BIN ?? '/usr/sbin/nginx';
/** The headers-more module ingress-nginx's nginx is built with (Server header); Debian ships it apart. */
export const HEADERS_MORE_MODULE =
  process.env.NGINX_HEADERS_MORE_MODULE ?? '/usr/lib/nginx/modules/ngx_http_headers_more_filter_module.so';
const NOBODY = { uid: 65534, gid: 65534 };

export class Nginx {
  private server: Managed | undefined;
  readonly conf: string;
  readonly errorLog: string;

  constructor(
    readonly prefix: string,
    private readonly statusPort: number,
  ) {
    this.conf = join(prefix, 'nginx.conf');
    this.errorLog = join(prefix, 'error.log');
  }

  private write(config: string): void {
    writeFileSync(this.conf, config);
    // -t catches a bad translation with nginx's own message before anything is (re)loaded.
    execFileSync(NGINX, ['-t', '-q', '-p', this.prefix, '-c', this.conf, '-e', this.errorLog], {
      uid: NOBODY.uid,
      gid: NOBODY.gid,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  }

  private async generationServed(generation: number): Promise<void> {
    await waitFor(`nginx to serve configuration generation ${generation}`, 30_000, async () => {
      const answer = await probe(this.statusPort, '/generation', 2000);
      return answer.status === 200 && answer.body === String(generation);
    });
  }

  async start(config: string, generation: number): Promise<void> {
    mkdirSync(this.prefix, { recursive: true });
    chownSync(this.prefix, NOBODY.uid, NOBODY.gid);
    this.write(config);
    this.server = startLogged(
      'nginx',
      NGINX,
      ['-p', this.prefix, '-c', this.conf, '-e', this.errorLog, '-g', 'daemon off;'],
      join(this.prefix, 'nginx.out'),
      { uid: NOBODY.uid, gid: NOBODY.gid },
    );
    await this.generationServed(generation);
  }

  /** The master's worker processes (its children). */
  private workers(): string[] {
    if (!this.server) return [];
    const pid = this.server.pid;
    try {
      return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    } catch {
      return [];
    }
  }

  async reload(config: string, generation: number): Promise<void> {
    if (!this.server || this.server.hasExited()) throw new Error('nginx is not running');
    this.write(config);
    const old = this.workers();
    process.kill(this.server.pid, 'SIGHUP');
    await this.generationServed(generation);
    // Until the old workers have closed their listeners (they exit once their requests are done),
    // a new connection may still land on the old configuration; the real controller switches
    // endpoints without a reload, so the emulation waits for them to be gone.
    await waitFor(`nginx's old workers (${old.join(', ')}) to exit`, 30_000, () =>
      old.every((pid) => !existsSync(`/proc/${pid}`)),
    );
  }

  async stop(): Promise<void> {
    // SIGQUIT: graceful, like a controller pod's shutdown.
    if (this.server) await stop(this.server, 'SIGQUIT', 10_000);
  }
}

/**
 * The emulated proxy: nginx with the translated configuration, reloaded for each change of the
 * ready endpoints (and the retry cases' misbehaving one beside them), one reload at a time.
 */
export class EmulatedProxy {
  readonly nginx: Nginx;
  readonly broken: BrokenEndpoint;
  /** The ready replicas' addresses, as the Service's endpoints list them. */
  ready: string[] = [];
  generation = 0;
  private reloads: Promise<void> = Promise.resolve();

  constructor(
    prefix: string,
    statusPort: number,
    private readonly conf: (endpoints: string[], generation: number) => string,
  ) {
    this.nginx = new Nginx(prefix, statusPort);
    this.broken = new BrokenEndpoint(this.nginx.errorLog);
  }

  async start(): Promise<void> {
    this.generation++;
    await this.nginx.start(this.conf([], this.generation), this.generation);
  }

  readonly reload = (): Promise<void> =>
    (this.reloads = this.reloads
      .catch(() => undefined)
      .then(async () => {
        this.generation++;
        await this.nginx.reload(
          this.conf([...this.ready, ...this.broken.endpoints()], this.generation),
          this.generation,
        );
      }));

  /** Resolves once every reload asked for so far is done. */
  readonly settled = (): Promise<void> => this.reloads;
}
