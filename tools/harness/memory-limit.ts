/**
 * A memory limit for one child process, the way a container has one: a memory cgroup of its own
 * under this process's, with the limit set before the child starts. The kernel enforces it (past
 * it the child is OOM-killed, as a pod is), and Node sizes V8's heap from it at start-up
 * (nodejs/node src/api/environment.cc, SetIsolateCreateParamsForNode, reads libuv's
 * uv_get_constrained_memory), so the child collects garbage as it would in its pod, not as a
 * process that sees all of the machine's memory.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export interface MemoryCgroup {
  /** The command that starts `argv` inside the cgroup (the pid stays the child's own). */
  wrap(argv: string[]): { command: string; args: string[] };
  /** Removes the cgroup; call it once the child has exited. */
  remove(): void;
}

/** This process's cgroup folder for memory: v1's memory hierarchy, else the unified (v2) one. */
function ownMemoryCgroup(): { folder: string; limitFile: string } {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n');
  const v1 = lines
    .map((l) => l.split(':'))
    .find(([, controllers]) => controllers?.split(',').includes('memory'));
  if (v1?.[2] !== undefined) {
    return { folder: path.join('/sys/fs/cgroup/memory', v1[2]), limitFile: 'memory.limit_in_bytes' };
  }
  const v2 = lines.map((l) => l.split(':')).find(([id, controllers]) => id === '0' && controllers === '');
  const mount = existsSync('/sys/fs/cgroup/cgroup.controllers') ? '/sys/fs/cgroup' : '/sys/fs/cgroup/unified';
  if (v2?.[2] !== undefined) return { folder: path.join(mount, v2[2]), limitFile: 'memory.max' };
  throw new Error('no memory cgroup in /proc/self/cgroup');
}

let made = 0;

/** A fresh memory cgroup limited to `bytes`; throws, saying why, where this process may not make one. */
export function memoryCgroup(label: string, bytes: number): MemoryCgroup {
  const own = ownMemoryCgroup();
  const folder = path.join(own.folder, `sp-${label}-${process.pid}-${made++}`);
  try {
    mkdirSync(folder);
    writeFileSync(path.join(folder, own.limitFile), String(bytes));
  } catch (error) {
    throw new Error(
      `a memory limit like a pod's needs a memory cgroup this process may create (root, or a delegated cgroup): ${folder}`,
      { cause: error },
    );
  }
  const procs = path.join(folder, 'cgroup.procs');
  return {
    // The shell moves itself into the cgroup and then becomes the child, so the child starts there.
    wrap: (argv) => ({ command: '/bin/sh', args: ['-c', 'echo $$ > "$0" && exec "$@"', procs, ...argv] }),
    remove: () => {
      try {
        rmdirSync(folder);
      } catch {
        // A process still in it keeps it; the next boot clears it.
      }
    },
  };
}
