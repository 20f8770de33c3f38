/**
 * A third endpoint of the API Service that misbehaves, for the retry cases (suite/retries.e2e.test.ts):
 * `refuse` is a replica that is gone but still listed (nothing listens), `reset` one that dies after
 * reading a request (closes the connection without an answer), `hang` one that never answers. What
 * nginx did with it is read back from nginx's error log, which names the upstream and the request.
 */
import { readFileSync, statSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { freePort, listenLocal } from '../../tools/harness/service';

export type BrokenMode = 'refuse' | 'reset' | 'hang';

export class BrokenEndpoint {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private address: string | undefined;
  private logOffset = 0;

  constructor(private readonly errorLog: string) {}

  /** The endpoint to add to the ready ones, while one is open. */
  endpoints(): string[] {
    return this.address ? [this.address] : [];
  }

  async open(mode: BrokenMode): Promise<void> {
    await this.close();
    this.logOffset = statSync(this.errorLog, { throwIfNoEntry: false })?.size ?? 0;
    if (mode === 'refuse') {
      // A free port nobody listens on: connect() is refused, nothing is sent.
      this.address = `127.0.0.1:${await freePort()}`;
      return;
    }
    const server = createServer((socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      socket.on('error', () => undefined);
      // reset: the request was sent, then the connection goes away without an answer.
      if (mode === 'reset') socket.once('data', () => socket.destroy());
    });
    this.server = server;
    this.address = `127.0.0.1:${await listenLocal(server)}`;
  }

  /** nginx's error-log lines about this endpoint since it was opened. */
  failures(): string[] {
    const address = this.address;
    if (!address) return [];
    let text: string;
    try {
      text = readFileSync(this.errorLog).subarray(this.logOffset).toString('utf8');
    } catch {
      return [];
    }
    return text.split('\n').filter((line) => line.includes(`upstream: "http://${address}/`));
  }

  async close(): Promise<void> {
    this.address = undefined;
    for (const socket of this.sockets) socket.destroy();
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise((resolvePromise) => server.close(resolvePromise));
  }
}
