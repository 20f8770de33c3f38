import type { Socket } from 'node:net';
import type { RequestHandler, Response } from 'express';

/**
 * The status a request is logged and counted with when its client closed the connection before
 * the answer was fully sent: nginx's "client closed request", so the two logs count alike.
 */
export const CLIENT_CLOSED_REQUEST = 499;

/** The status a request's log line and metrics carry: its own once sent in full, else 499. */
export const settledStatus = (res: Response): number =>
  res.writableFinished ? res.statusCode : CLIENT_CLOSED_REQUEST;

/**
 * Requests waiting on one connection for the answers before theirs. Past this many the client is
 * not pipelining but flooding (browsers and proxies pipeline a few at most), and the connection
 * is closed: each waiting request holds its parsed headers until its turn.
 */
export const MAX_WAITING_PER_CONNECTION = 32;

/**
 * Pipelined requests being answered at once in the whole process. The answer before one was
 * handed to the operating system, not necessarily read: a client that reads nothing has the
 * kernel's socket buffers fill with its first answers, and the next one then stays in this
 * process until the client reads or the connection times out. So these, each at most the largest
 * answer (~2 MB), are what never-reading clients can make the process hold, however many
 * connections they open; requests that are not pipelined never wait for them.
 */
export const PIPELINED_ANSWERS_AT_ONCE = 16;

const waiting = new WeakMap<Socket, number>();
let answering = 0;
/** Pipelined requests whose turn on their connection has come, in order, waiting for a place. */
const queued: (() => void)[] = [];

function answered(): void {
  answering--;
  queued.shift()?.();
}

/**
 * One answer at a time per connection. Node parses every pipelined request it has read and hands
 * each to the app at once, queueing the answers: a client that sends many requests for a large
 * page and reads nothing would make the process hold every one of those answers in memory. Here a
 * request whose answer would queue behind an unsent one waits, unread, until Node moves the
 * connection on to it (its response gets the socket, once the previous answer has been handed
 * to the operating system) and one of the process's PIPELINED_ANSWERS_AT_ONCE places is free; the
 * connection is not read meanwhile, so the client's further requests stay in its own buffers. A
 * request whose client goes away while it waits ends here: its response 'close' comes as for any
 * other abandoned request, so the request log and the metrics (in front of this) record it, 499.
 */
export const oneAnswerAtATime: RequestHandler = (req, res, next) => {
  if (res.socket) {
    next();
    return;
  }
  const socket = req.socket;
  const count = (waiting.get(socket) ?? 0) + 1;
  waiting.set(socket, count);
  const settle = () => {
    const left = (waiting.get(socket) ?? 1) - 1;
    waiting.set(socket, left);
    // Node pauses the socket itself while answers are not flowing; resuming is a no-op then.
    if (left === 0 && !socket.destroyed) socket.resume();
  };
  const start = () => {
    req.off('close', abandon);
    settle();
    answering++;
    let done = false;
    const release = () => {
      if (done) return;
      done = true;
      answered();
    };
    res.once('finish', release);
    res.once('close', release);
    next();
  };
  const placed = () => {
    if (answering < PIPELINED_ANSWERS_AT_ONCE) start();
    else queued.push(start);
  };
  const abandon = () => {
    res.off('socket', placed);
    const at = queued.indexOf(start);
    if (at >= 0) queued.splice(at, 1);
    settle();
    // Node never gives 'close' to a response that did not get its turn; the listeners wait for it.
    res.destroy();
    res.emit('close');
  };
  res.once('socket', placed);
  // A waiting request is only ever closed by its connection closing (nobody reads it meanwhile).
  req.once('close', abandon);
  if (count > MAX_WAITING_PER_CONNECTION) {
    socket.destroy();
    return;
  }
  socket.pause();
};
