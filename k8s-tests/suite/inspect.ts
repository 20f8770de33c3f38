/**
 * A script run with `node -e` inside a running API replica (`podman exec`, `kubectl exec`): what
 * the service's own user may do there. It tries to create a file in each folder, reads PID 1's
 * command line and security state, and the memory limit of its cgroup; it prints one JSON line.
 */
export interface Inspection {
  uid: number;
  gid: number;
  groups: number[];
  /** Folder → "ok" when a file could be created there, else the error code (EROFS, EACCES…). */
  writes: Record<string, string>;
  /** PID 1's command line. */
  pid1: string;
  /** PID 1's CapEff, CapBnd, NoNewPrivs and Seccomp lines from /proc/1/status. */
  status: Record<string, string>;
  /** The cgroup's memory limit in bytes ("max" when none). */
  memoryLimit: string;
}

/** Folders of the image and the usual writable places of a Linux system; the chart mounts only /tmp. */
export const PROBED_FOLDERS = [
  '/',
  '/app',
  '/app/dist',
  '/app/node_modules',
  '/etc',
  '/home/node',
  '/usr/local/bin',
  '/var/tmp',
  '/run',
  '/tmp',
];

export const INSPECT_SCRIPT = `
const fs = require('node:fs');
const out = { uid: process.getuid(), gid: process.getgid(), groups: process.getgroups(), writes: {}, status: {} };
for (const dir of ${JSON.stringify(PROBED_FOLDERS)}) {
  const file = dir.replace(/\\/$/, '') + '/.write-probe-' + process.pid;
  try { fs.writeFileSync(file, 'x'); fs.unlinkSync(file); out.writes[dir] = 'ok'; }
  catch (error) { out.writes[dir] = error.code; }
}
out.pid1 = fs.readFileSync('/proc/1/cmdline', 'utf8').split('\\0').filter(Boolean).join(' ');
const status = fs.readFileSync('/proc/1/status', 'utf8');
for (const key of ['CapEff', 'CapBnd', 'NoNewPrivs', 'Seccomp'])
  out.status[key] = (new RegExp('^' + key + ':\\\\s*(\\\\S+)', 'm').exec(status) || [])[1];
for (const file of ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes']) {
  try { out.memoryLimit = fs.readFileSync(file, 'utf8').trim(); break; } catch {}
}
process.stdout.write(JSON.stringify(out) + '\\n');
`;
