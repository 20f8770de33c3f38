/**
 * The machine's CPU split in two with Linux control groups, for `npm run bench:pooler --
 * --pooler-cpu <cores>`: PgBouncer gets `cores` of CPU time to itself, and everything else (this
 * process with its load generator, the servers it starts, PostgreSQL) the rest. In a cluster the
 * pooler runs in pods of its own (CloudNativePG's Pooler), so its CPU does not come out of the
 * service's; on one machine it does, unless it is split like this. Every contender, direct ones
 * too, then runs on the same smaller share, so the ratios compare like with like.
 *
 * The quota is the CFS bandwidth limit: cgroup v2's `cpu.max` or v1's `cpu.cfs_quota_us`. Needs
 * root. restore() moves PostgreSQL's processes back to the root group; a run killed before it
 * leaves them in `sp-bench-rest`, on the smaller share, until moved back or restarted.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { postgresProcesses } from './measure';

const PERIOD_US = 100_000;

interface Hierarchy {
  root: string;
  setQuota(group: string, cores: number): void;
}

function hierarchy(): Hierarchy {
  const v2 = '/sys/fs/cgroup';
  if (existsSync(path.join(v2, 'cgroup.controllers'))) {
    if (!readFileSync(path.join(v2, 'cgroup.controllers'), 'utf8').split(/\s+/).includes('cpu'))
      throw new Error('--pooler-cpu: the cgroup v2 hierarchy has no cpu controller');
    writeFileSync(path.join(v2, 'cgroup.subtree_control'), '+cpu');
    return {
      root: v2,
      setQuota: (group, cores) => {
        writeFileSync(
          path.join(group, 'cpu.max'),
          `${String(Math.round(cores * PERIOD_US))} ${String(PERIOD_US)}`,
        );
      },
    };
  }
  const v1 = '/sys/fs/cgroup/cpu';
  if (existsSync(path.join(v1, 'cpu.cfs_quota_us')))
    return {
      root: v1,
      setQuota: (group, cores) => {
        writeFileSync(path.join(group, 'cpu.cfs_period_us'), String(PERIOD_US));
        writeFileSync(path.join(group, 'cpu.cfs_quota_us'), String(Math.round(cores * PERIOD_US)));
      },
    };
  throw new Error(
    '--pooler-cpu needs Linux control groups with the cpu controller (v2, or v1 at /sys/fs/cgroup/cpu)',
  );
}

export class CpuSplit {
  private readonly h: Hierarchy;
  private readonly rest: string;
  private readonly pooler: string;
  private dataDirectory = '';
  /** Cores each side may use. */
  readonly shares: { pooler: number; rest: number };

  constructor(poolerCores: number) {
    const cpus = os.cpus().length;
    if (!(poolerCores > 0 && poolerCores < cpus))
      throw new Error(`--pooler-cpu takes a share of a core between 0 and ${String(cpus)}`);
    this.shares = { pooler: poolerCores, rest: cpus - poolerCores };
    this.h = hierarchy();
    this.rest = path.join(this.h.root, 'sp-bench-rest');
    this.pooler = path.join(this.h.root, 'sp-bench-pooler');
    for (const [group, cores] of [
      [this.rest, this.shares.rest],
      [this.pooler, this.shares.pooler],
    ] as const) {
      mkdirSync(group, { recursive: true });
      this.h.setQuota(group, cores);
    }
  }

  /** This process (and so every server it starts from now on) and PostgreSQL go to the rest. */
  enterRest(postgresDataDirectory: string): void {
    this.dataDirectory = postgresDataDirectory;
    this.move(this.rest, process.pid);
    for (const pid of postgresProcesses(postgresDataDirectory)) this.move(this.rest, pid);
  }

  placePooler(pid: number): void {
    this.move(this.pooler, pid);
  }

  /** Everything back in the root group, the two groups removed. */
  restore(): void {
    // PostgreSQL as it is now: backends forked during the run are in the group too.
    const postgres = this.dataDirectory ? postgresProcesses(this.dataDirectory) : [];
    for (const pid of [process.pid, ...postgres]) {
      try {
        this.move(this.h.root, pid);
      } catch {
        // A backend that has exited since.
      }
    }
    for (const group of [this.pooler, this.rest]) {
      try {
        rmdirSync(group);
      } catch {
        // A process still inside (a server not yet gone): the group stays, empty groups are harmless.
      }
    }
  }

  private move(group: string, pid: number): void {
    writeFileSync(path.join(group, 'cgroup.procs'), String(pid));
  }
}
