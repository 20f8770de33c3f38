/**
 * A TCP relay standing in for a Service address in front of a database (CloudNativePG's -rw
 * Service, say): it forwards to a target that can move (`retarget`, as the Service's endpoint
 * moves to a promoted standby), and it can `stall`: from then on nothing it holds forwards a byte
 * either way and nothing is closed, the way connections behave when a node vanishes from the
 * network (no FIN, no RST, no answer); and it can lose the answer to one statement
 * (`loseAnswerTo`), or hold one back a while (`delayAnswerTo`), and it can hold back cancel requests
 * (`delayCancels`). A connection closed by the target is closed to the client.
 */
import net from 'node:net';
import { freePort } from './service';

interface Pair {
  client: net.Socket;
  upstream?: net.Socket;
  stalled: boolean;
  /** Forwards to the target but no longer back: the answer to what it sent last is lost. */
  deaf?: boolean;
  /** Once deaf, closed when the target's answer comes, rather than left open. */
  closeOnAnswer?: boolean;
  /** The target's answer to what it sent last is held back this long. */
  holdAnswerMs?: number;
  /** What came back while the answer is held, passed on in order when the hold ends. */
  held?: Buffer[];
  /** Whether anything has come from the client yet: a cancel request comes first and alone. */
  spoken?: boolean;
}

/** The protocol's CancelRequest: 16 bytes, the code 80877102 after the length. */
const isCancelRequest = (chunk: Buffer): boolean => chunk.length === 16 && chunk.readInt32BE(4) === 80877102;

export class Relay {
  port = 0;
  private server: net.Server | undefined;
  private readonly pairs = new Set<Pair>();
  private stalled = false;
  private loseAnswerAfter: { marker: string; close: boolean } | undefined;
  private delayAnswerAfter: { marker: string; ms: number } | undefined;
  private cancelDelayMs = 0;

  constructor(
    private targetPort: number,
    private readonly targetHost = '127.0.0.1',
  ) {}

  /** Listens on `port` when given (a database address that appears later), else on a free one. */
  async start(port?: number): Promise<void> {
    this.port = port ?? (await freePort());
    this.server = net.createServer((client) => {
      this.accept(client);
    });
    const server = this.server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => {
        resolve();
      });
    });
  }

  private accept(client: net.Socket): void {
    const pair: Pair = { client, stalled: this.stalled };
    this.pairs.add(pair);
    const drop = () => {
      if (pair.stalled) return;
      this.pairs.delete(pair);
      client.destroy();
      pair.upstream?.destroy();
    };
    client.on('error', () => undefined);
    client.on('close', drop);
    // Accepted while stalled: held open, never forwarded (a SYN that a vanished node never answers
    // would also leave the client waiting until its own time-out).
    if (pair.stalled) return;
    const upstream = net.connect(this.targetPort, this.targetHost);
    pair.upstream = upstream;
    upstream.on('error', () => undefined);
    upstream.on('close', drop);
    client.on('data', (chunk: Buffer) => {
      if (pair.stalled) return;
      const first = pair.spoken !== true;
      pair.spoken = true;
      if (first && this.cancelDelayMs > 0 && isCancelRequest(chunk)) {
        setTimeout(() => upstream.write(chunk), this.cancelDelayMs);
        return;
      }
      const delay = this.delayAnswerAfter;
      if (delay && chunk.includes(delay.marker)) {
        this.delayAnswerAfter = undefined;
        pair.holdAnswerMs = delay.ms;
      }
      const loss = this.loseAnswerAfter;
      if (loss && chunk.includes(loss.marker)) {
        this.loseAnswerAfter = undefined;
        pair.deaf = true;
        pair.closeOnAnswer = loss.close;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (pair.stalled) return;
      if (pair.held) {
        pair.held.push(chunk);
        return;
      }
      if (pair.holdAnswerMs !== undefined) {
        const held = [chunk];
        pair.held = held;
        setTimeout(() => {
          pair.held = undefined;
          for (const part of held) client.write(part);
        }, pair.holdAnswerMs);
        pair.holdAnswerMs = undefined;
        return;
      }
      if (!pair.deaf) client.write(chunk);
      else if (pair.closeOnAnswer) drop();
    });
  }

  /** Every connection held now, and every new one, forwards nothing and stays open. */
  stall(): void {
    this.stalled = true;
    for (const pair of this.pairs) pair.stalled = true;
  }

  /**
   * The next message sent with `marker` in it (a statement's text or prepared name, a COMMIT) reaches
   * the target, but nothing on its connection comes back: the target acts on it and its answer is
   * lost, as when a node goes after taking a statement. The connection stays open, or with `close`
   * is closed both ways once the answer comes (a connection broken just after the target acted).
   */
  loseAnswerTo(marker: string, { close = false }: { close?: boolean } = {}): void {
    this.loseAnswerAfter = { marker, close };
  }

  /**
   * The answer to the next message sent with `marker` in it reaches the client `ms` late, as on a
   * slow link: the target has answered, the client has not heard yet.
   */
  delayAnswerTo(marker: string, ms: number): void {
    this.delayAnswerAfter = { marker, ms };
  }

  /**
   * Cancel requests reach the target `ms` late: each comes on a connection of its own, whose set-up
   * (a pooler's too) can make it slower than the statements' own connection.
   */
  delayCancels(ms: number): void {
    this.cancelDelayMs = ms;
  }

  /** New connections go to `port` and forward again; the stalled ones stay stalled. */
  retarget(port: number): void {
    this.targetPort = port;
    this.stalled = false;
  }

  /** Connections held open, stalled or not. */
  get connections(): number {
    return this.pairs.size;
  }

  async close(): Promise<void> {
    for (const pair of this.pairs) {
      pair.client.destroy();
      pair.upstream?.destroy();
    }
    this.pairs.clear();
    const server = this.server;
    if (server) await new Promise((resolve) => server.close(resolve));
  }
}
