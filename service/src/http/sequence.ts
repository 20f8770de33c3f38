import type { RequestHandler } from 'express';

/**
 * Middleware that applies to every path, run one after the other as one Express layer: each layer
 * of Express's router costs its own path match, bookkeeping and call wrapper on every request,
 * for steps that never skip a path. Each step is called as Express would: an error it passes to
 * `next`, throws, or rejects with goes to the app's error handling, and the steps after it are
 * skipped; one that answers without calling `next` ends the request there.
 */
export function inSequence(...steps: RequestHandler[]): RequestHandler {
  return (req, res, next) => {
    let at = 0;
    const step = (error?: unknown): void => {
      // Express's own convention: any truthy value passed to next is an error.
      if (error) {
        next(error);
        return;
      }
      const handler = steps[at++];
      if (!handler) {
        next();
        return;
      }
      try {
        const result: unknown = handler(req, res, step);
        if (result instanceof Promise)
          result.catch((rejected: unknown) => {
            next(rejected ?? new Error('Rejected promise'));
          });
      } catch (thrown) {
        next(thrown);
      }
    };
    step();
  };
}
