/** The figures of `npm run bench:login` (tools/bench/login-starvation.ts), and their section of docs/benchmarks.md. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

export const LOGIN_RESULT_FILE = 'login-starvation.json';

/** One round: sequential probes for a while, alone or beside the failed-login clients. */
export interface LoginRound {
  gzipPostP50: number;
  validLoginP50: number;
  failedLoginP50?: number;
  requests: { gzipPosts: number; validLogins: number; failedLogins: number };
}

export interface LoginResult {
  measuredAt: string;
  posts: number;
  seconds: number;
  attackers: number;
  bcryptRounds: number;
  node: string;
  loadAverage: number[];
  results: { concurrency: number; quiet: LoginRound; attacked: LoginRound }[];
}

/** The table of one run: each PASSWORD_HASH_CONCURRENCY, quiet against attacked. */
export function loginTable(result: LoginResult): string[] {
  return [
    '| `PASSWORD_HASH_CONCURRENCY` | gzip-bodied `POST /posts/` p50, quiet → 8 failed logins | valid login p50, quiet → 8 failed logins | failed login p50 |',
    '|---|---:|---:|---:|',
    ...result.results.map(
      (r) =>
        `| ${r.concurrency >= 64 ? `${String(r.concurrency)} (no bound, as before)` : String(r.concurrency)} | ${String(r.quiet.gzipPostP50)} → ${String(r.attacked.gzipPostP50)} ms | ${String(r.quiet.validLoginP50)} → ${String(r.attacked.validLoginP50)} ms | ${String(r.attacked.failedLoginP50 ?? '')} ms |`,
    ),
  ];
}

/** The section, when the folder holds a run. */
export function loginSection(resultsDir: string): string[] {
  const file = path.join(resultsDir, LOGIN_RESULT_FILE);
  if (!existsSync(file)) return [];
  const r = JSON.parse(readFileSync(file, 'utf8')) as LoginResult;
  return [
    '## Login and the threadpool',
    '',
    "bcrypt (native) and request decompression (zlib) both run on libuv's threadpool, four threads by default. " +
      `\`npm run bench:login\` (tools/bench/login-starvation.ts) starts the service on ${r.posts.toLocaleString('en-US')} posts ` +
      `(\`BCRYPT_ROUNDS=${String(r.bcryptRounds)}\`), then for ${String(r.seconds)} s sends sequential probes (a gzip-bodied ` +
      `\`POST /posts/\`, a valid login) alone, and again beside ${String(r.attackers)} clients sending failed logins back to back, ` +
      'once per `PASSWORD_HASH_CONCURRENCY`. Measured ' +
      `${r.measuredAt}, Node ${r.node}, load average ${r.loadAverage.join(' / ')} (a shared, busy machine: the times are high, the contrast is the point).`,
    '',
    ...loginTable(r),
    '',
    'Without a bound, eight logins fill every thread and each gzip-bodied request waits behind them; with two ' +
      'hashes at most, decompression keeps two threads. Logins still queue behind each other (bcrypt is work the ' +
      "CPU must do; the proxy's 10 a minute per address is what bounds failed ones), and a failed login costs what " +
      'a valid one does: both wait for the same turn and run the same compare.',
    '',
  ];
}
