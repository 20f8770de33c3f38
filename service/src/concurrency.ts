/** Bounds on how much of one kind of work a process does at once. */

/**
 * At most `size` at once, and nothing waits: work that finds every slot taken is refused on the
 * spot, so it never holds a place in line (or a request's time budget) for work that may not come.
 */
export class Slots {
  private taken = 0;

  constructor(readonly size: number) {}

  /** Runs `work` in a free slot, or returns `refused` at once when there is none. */
  async tryRun<T, R>(work: () => Promise<T>, refused: () => R): Promise<T | R> {
    if (this.taken >= this.size) return refused();
    this.taken += 1;
    try {
      return await work();
    } finally {
      this.taken -= 1;
    }
  }

  get inUse(): number {
    return this.taken;
  }
}

/**
 * At most `size` at once; the rest wait their turn, first come first served. For work each caller
 * must get done (a password check), whose share of a shared resource is what is bounded.
 */
export class Semaphore {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly size: number) {}

  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.running >= this.size) {
      // The slot is handed over by the one that frees it, so `running` never drops in between.
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running += 1;
    }
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running -= 1;
    }
  }
}
