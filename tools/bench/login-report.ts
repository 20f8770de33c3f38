/** The figures of `npm run bench:login` (tools/bench/login-starvation.ts), and the Markdown tables it prints of them. */
import { loadAverageText, section, table } from './common';

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

/** The run's section: what was measured how, then each PASSWORD_HASH_CONCURRENCY, quiet against attacked. */
export function loginSection(r: LoginResult): string[] {
  const attacked = `${String(r.attackers)} failed logins`;
  return section(
    '## Login and the threadpool',
    table([
      {
        Posts: r.posts,
        '`BCRYPT_ROUNDS`': r.bcryptRounds,
        's of sequential probes, alone and attacked': r.seconds,
        'Clients sending failed logins': r.attackers,
        Measured: r.measuredAt,
        Node: r.node,
        'Load average at the end': loadAverageText(r.loadAverage),
      },
    ]),
    table(
      r.results.map(({ concurrency, quiet, attacked: a }) => ({
        '`PASSWORD_HASH_CONCURRENCY`': `${String(concurrency)}${concurrency >= 64 ? ' (no bound, as before)' : ''}`,
        [`gzip-bodied \`POST /posts/\` p50, quiet → ${attacked}`]: `${String(quiet.gzipPostP50)} → ${String(a.gzipPostP50)} ms`,
        [`valid login p50, quiet → ${attacked}`]: `${String(quiet.validLoginP50)} → ${String(a.validLoginP50)} ms`,
        'failed login p50': `${String(a.failedLoginP50 ?? '')} ms`,
      })),
    ),
  );
}
