import { CLOCK_SKEW_SECONDS } from './tokens';

/** What a verified token's next use must still check: the times that depend on the clock. */
export interface TokenTimes {
  exp: number;
  iat: number;
  nbf?: number;
}

interface Entry extends TokenTimes {
  id: number;
}

/**
 * Access tokens that passed the whole check, by the whole token, with their subject: a token's
 * next use costs a map look-up, its times still checked (docs/security.md, "The token cache").
 */
export class VerifiedTokens {
  private readonly entries = new Map<string, Entry>();
  /** The earliest `exp` held: from then on a look-up sweeps out what has expired. */
  private earliestExp = Number.POSITIVE_INFINITY;

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.entries.size;
  }

  /** The subject of a token verified before and still within its times, else undefined. */
  subject(token: string, nowSeconds: number): number | undefined {
    if (nowSeconds >= this.earliestExp) this.sweep(nowSeconds);
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    const latest = nowSeconds + CLOCK_SKEW_SECONDS;
    if (entry.iat > latest || (entry.nbf !== undefined && entry.nbf > latest)) return undefined;
    return entry.id;
  }

  /** Keeps a token the full check has just accepted, if there is room. */
  add(token: string, id: number, times: TokenTimes, nowSeconds: number): void {
    if (times.exp <= nowSeconds || this.capacity === 0) return;
    if (this.entries.size >= this.capacity && !this.entries.has(token)) {
      if (nowSeconds >= this.earliestExp) this.sweep(nowSeconds);
      if (this.entries.size >= this.capacity) return;
    }
    this.entries.set(token, { id, exp: times.exp, iat: times.iat, nbf: times.nbf });
    this.earliestExp = Math.min(this.earliestExp, times.exp);
  }

  private sweep(nowSeconds: number): void {
    let earliest = Number.POSITIVE_INFINITY;
    for (const [token, entry] of this.entries) {
      if (entry.exp <= nowSeconds) this.entries.delete(token);
      else earliest = Math.min(earliest, entry.exp);
    }
    this.earliestExp = earliest;
  }
}
