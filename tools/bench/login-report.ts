/** The figures of `npm run bench:login` (tools/bench/login-starvation.ts), and the Markdown table it prints of them. */

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
function loginTable(result: LoginResult): string[] {
  return [
    '| `PASSWORD_HASH_CONCURRENCY` | gzip-bodied `POST /posts/` p50, quiet → 8 failed logins | valid login p50, quiet → 8 failed logins | failed login p50 |',
    '|---|---:|---:|---:|',
    ...result.results.map(
      (r) =>
        `| ${r.concurrency >= 64 ? `${String(r.concurrency)} (no bound, as before)` : String(r.concurrency)} | ${String(r.quiet.gzipPostP50)} → ${String(r.attacked.gzipPostP50)} ms | ${String(r.quiet.validLoginP50)} → ${String(r.attacked.validLoginP50)} ms | ${String(r.attacked.failedLoginP50 ?? '')} ms |`,
    ),
  ];
}

/** The run's section: what was measured how, then the table. */
export function loginSection(r: LoginResult): string[] {
  return [
    '## Login and the threadpool',
    '',
    `\`npm run bench:login\`, ${r.posts.toLocaleString('en-US')} posts, \`BCRYPT_ROUNDS=${String(r.bcryptRounds)}\`: p50 of sequential probes over ${String(r.seconds)} s, alone and beside ${String(r.attackers)} clients sending failed logins, per \`PASSWORD_HASH_CONCURRENCY\`. Measured ${r.measuredAt}, Node ${r.node}, load average ${r.loadAverage.join(' / ')}.`,
    '',
    ...loginTable(r),
    '',
  ];
}
