import { AsyncResource } from 'node:async_hooks';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { RequestHandler, Response } from 'express';

/**
 * The status a request is logged and counted with when its client closed the connection before
 * the answer was fully sent: nginx's "client closed request", so the two logs count alike.
 */
const CLIENT_CLOSED_REQUEST = 499;

/** The status a request's log line and metrics carry: its own once sent in full, else 499. */
export const settledStatus = (res: Response): number =>
  res.writableFinished ? res.statusCode : CLIENT_CLOSED_REQUEST;

/**
 * Requests waiting on one connection for the answers before theirs. Past this many the client is
 * not pipelining but flooding (browsers and proxies pipeline a few at most), and the connection
 * is closed: each waiting request holds its parsed headers until its turn.
 */
const MAX_WAITING_PER_CONNECTION = 32;

/**
 * Pipelined requests being answered at once in the whole process. The answer before one was
 * handed to the operating system, not necessarily read, so each of these, up to the largest
 * answer (about 6 MB: docs/security.md), may stay here until its client reads; requests that are
 * not pipelined never wait for them. UNSENT_ANSWER_BYTES bounds what all answers hold together.
 */
const PIPELINED_ANSWERS_AT_ONCE = 16;

/**
 * The bytes of ended answers the process holds, not yet taken by the operating system, beyond
 * which the connection whose answer has waited longest is closed. The kernel takes a few
 * megabytes of a connection whose client does not read; the rest stays here until the client
 * reads or the connection times out, so without a bound each such connection holds up to the
 * largest answer, and a hundred of them exceed the pod's memory limit.
 */
const UNSENT_ANSWER_BYTES = 64 * 2 ** 20;

const waiting = new WeakMap<Socket, number>();
let answering = 0;
/** Pipelined requests whose turn on their connection has come, in order, waiting for a place. */
const queued: (() => void)[] = [];

function answered(): void {
  answering--;
  queued.shift()?.();
}

/** Ended answers not yet taken by the operating system, oldest first, and their bytes. */
const unsent = new Map<ServerResponse, number>();
let unsentBytes = 0;

function taken(res: ServerResponse): void {
  const bytes = unsent.get(res);
  if (bytes === undefined) return;
  unsent.delete(res);
  unsentBytes -= bytes;
}

/**
 * Counts each answer the process still holds once its route has ended it (every byte the
 * connection has not handed to the operating system), until it is taken ('finish') or its
 * connection closes; past UNSENT_ANSWER_BYTES the oldest answers' connections are closed (499 in
 * the request log: their clients had not read them). A client that reads keeps nothing here for
 * long; the proxy in front reads every answer at once.
 */
export const unsentAnswersBounded: RequestHandler = (_req, res, next) => {
  res.once('prefinish', () => {
    const bytes = res.socket?.writableLength ?? 0;
    if (bytes === 0 || res.writableFinished) return;
    unsent.set(res, bytes);
    unsentBytes += bytes;
    res.once('finish', () => {
      taken(res);
    });
    res.once('close', () => {
      taken(res);
    });
    for (const [oldest] of unsent) {
      if (unsentBytes <= UNSENT_ANSWER_BYTES) break;
      taken(oldest);
      oldest.destroy();
    }
  });
  next();
};

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
  // Called later from another request's answer (its 'finish' gives this one the socket) or from the
  // queue: bound here, the request goes on in its own context (its database budget, its spans).
  const start = AsyncResource.bind(() => {
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
  });
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
