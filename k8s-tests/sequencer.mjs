/**
 * The end-to-end suite's file order: the upgrade case first (the runner starts the replicas from
 * the previous release, and that case upgrades them), then the standby-reads case (the failover
 * case promotes the only standby), the backup case last (it moves the service onto a recovered
 * Cluster), jest's own order in between and for every other project's files.
 */
import Sequencer from '@jest/test-sequencer';

export default class UpgradeFirst extends Sequencer {
  async sort(tests) {
    const rank = (test) =>
      test.path.endsWith('upgrade.e2e.test.ts')
        ? 0
        : test.path.endsWith('standby-reads.e2e.test.ts')
          ? 0.5
          : test.path.endsWith('backup.e2e.test.ts')
            ? 2
            : 1;
    // Array.prototype.sort is stable: the rest keep jest's order.
    return [...(await super.sort(tests))].sort((a, b) => rank(a) - rank(b));
  }
}
