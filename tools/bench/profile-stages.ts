/**
 * A list request's CPU split by stage, from a CPU profile of the service under load
 * (tools/bench/profile.ts), and the table it prints of it. Each sample goes to the stage of the
 * frame nearest its leaf that belongs to one: Node's own JavaScript and V8's builtins count for
 * whoever called them (a socket write for pg is the query's, one for the answer is writing the
 * answer), and Express's request and response helpers for the middleware or route that used them.
 */
import path from 'node:path';

export interface Frame {
  functionName: string;
  url: string;
}

/** The stages in the order of a request's way through the service; the table keeps this order. */
export const STAGES = [
  'HTTP in: parsing, connection (node:http)',
  'terminus (connection tracking)',
  'routing (Express, the router)',
  'Host and body-size checks',
  'request budget',
  'metrics',
  'request log (id, header)',
  'the log line (pino)',
  'pipelining guard',
  'security headers',
  'CORS',
  'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  'validation (query string, joi)',
  'query (pg: send, receive, rows)',
  'route handler (list, Link header)',
  'serialisation (JSON.stringify)',
  'ETag',
  'writing the answer (node:http, socket)',
  'garbage collection',
  'other: Node internals, timers, promises',
  'other',
] as const;
export type Stage = (typeof STAGES)[number];

const PACKAGES: Record<string, Stage> = {
  express: 'routing (Express, the router)',
  router: 'routing (Express, the router)',
  'path-to-regexp': 'routing (Express, the router)',
  parseurl: 'routing (Express, the router)',
  finalhandler: 'routing (Express, the router)',
  '@godaddy/terminus': 'terminus (connection tracking)',
  stoppable: 'terminus (connection tracking)',
  'prom-client': 'metrics',
  pino: 'the log line (pino)',
  'sonic-boom': 'the log line (pino)',
  'fast-redact': 'the log line (pino)',
  'pino-std-serializers': 'the log line (pino)',
  cors: 'CORS',
  vary: 'CORS',
  'object-assign': 'CORS',
  helmet: 'security headers',
  passport: 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  'passport-jwt': 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  'passport-strategy': 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  jsonwebtoken: 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  jws: 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  jwa: 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  'buffer-equal-constant-time': 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  'safe-buffer': 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  'ecdsa-sig-formatter': 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  ms: 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  semver: 'token (passport, passport-jwt, jsonwebtoken, auth.ts)',
  joi: 'validation (query string, joi)',
  '@hapi/hoek': 'validation (query string, joi)',
  '@hapi/topo': 'validation (query string, joi)',
  '@hapi/address': 'validation (query string, joi)',
  '@hapi/formula': 'validation (query string, joi)',
  '@hapi/tlds': 'validation (query string, joi)',
  '@standard-schema/spec': 'validation (query string, joi)',
  qs: 'validation (query string, joi)',
  pg: 'query (pg: send, receive, rows)',
  'pg-pool': 'query (pg: send, receive, rows)',
  'pg-protocol': 'query (pg: send, receive, rows)',
  'pg-types': 'query (pg: send, receive, rows)',
  'postgres-date': 'query (pg: send, receive, rows)',
  'postgres-array': 'query (pg: send, receive, rows)',
  'postgres-interval': 'query (pg: send, receive, rows)',
  'postgres-bytea': 'query (pg: send, receive, rows)',
  'pg-int8': 'query (pg: send, receive, rows)',
  knex: 'query (pg: send, receive, rows)',
  tarn: 'query (pg: send, receive, rows)',
  etag: 'ETag',
  fresh: 'ETag',
};

const SERVICE_FILES: [RegExp, Stage][] = [
  [/^service\/src\/http\/router\.ts$/, 'routing (Express, the router)'],
  [/^service\/src\/(app|db\/budget)\.ts$/, 'request budget'],
  [/^service\/src\/metrics\.ts$/, 'metrics'],
  [/^service\/src\/logger\.ts$/, 'the log line (pino)'],
  [/^service\/src\/http\/request-log\.ts$/, 'request log (id, header)'],
  [/^service\/src\/http\/pipelining\.ts$/, 'pipelining guard'],
  [/^service\/src\/http\/security-headers\.ts$/, 'security headers'],
  [/^service\/src\/http\/cors\.ts$/, 'CORS'],
  [/^service\/src\/http\/(protocol|body)\.ts$/, 'Host and body-size checks'],
  [/^service\/src\/http\/(auth|tokens)\.ts$/, 'token (passport, passport-jwt, jsonwebtoken, auth.ts)'],
  [/^service\/src\/(http\/validation|posts\/posts\.schemas)\.ts$/, 'validation (query string, joi)'],
  [/^service\/src\/(db\/.*|.*\.repository)\.ts$/, 'query (pg: send, receive, rows)'],
  [/^service\/src\/http\/json\.ts$/, 'serialisation (JSON.stringify)'],
  [/^service\/src\/posts\//, 'route handler (list, Link header)'],
  // The limit (tools/bench/limit.ts), profiled the same way for comparison.
  [/^bench\/reference\.ts$/, 'route handler (list, Link header)'],
];

/** Where a frame's file is: a package under node_modules, or a path under the checkout. */
function locate(url: string, root: string): { pkg?: string; file?: string; inPkg?: string } {
  const modules = url.lastIndexOf('/node_modules/');
  if (modules >= 0) {
    const parts = url.slice(modules + '/node_modules/'.length).split('/');
    const scoped = parts[0]?.startsWith('@') ?? false;
    const pkg = scoped ? `${parts[0] ?? ''}/${parts[1] ?? ''}` : (parts[0] ?? '');
    return { pkg, inPkg: parts.slice(scoped ? 2 : 1).join('/') };
  }
  const file = url.startsWith('file://') ? new URL(url).pathname : url;
  return { file: file.startsWith(root) ? path.relative(root, file) : file };
}

/** The stage a frame belongs to, or undefined for one that counts for its caller. */
export function stageOf(frame: Frame, root: string): Stage | undefined {
  const { url, functionName } = frame;
  if (url === '') {
    if (functionName === '(garbage collector)') return 'garbage collection';
    if (functionName === 'stringify') return 'serialisation (JSON.stringify)';
    return undefined;
  }
  if (url.startsWith('node:')) {
    if (url === 'node:_http_outgoing') return 'writing the answer (node:http, socket)';
    if (url === 'node:_http_server' && /^(writeHead|_implicitHeader|_writeRaw)$/.test(functionName))
      return 'writing the answer (node:http, socket)';
    if (/^node:_http_(server|common|incoming)$/.test(url)) return 'HTTP in: parsing, connection (node:http)';
    return undefined;
  }
  const { pkg, inPkg, file } = locate(url, root);
  if (pkg !== undefined) {
    // The request's query string, parsed on first read of req.query.
    if (pkg === 'express' && inPkg === 'lib/request.js' && functionName === 'query')
      return 'validation (query string, joi)';
    // Helpers on req and res: their cost is whoever's called them.
    if (pkg === 'express' && /^lib\/(request|response)\.js$/.test(inPkg ?? '')) return undefined;
    return PACKAGES[pkg] ?? 'other';
  }
  if (file === 'tools/bench/reference.ts') {
    if (/Subject$|^parsePart$/.test(functionName))
      return 'token (passport, passport-jwt, jsonwebtoken, auth.ts)';
    if (functionName === 'handle') return 'routing (Express, the router)';
    // JSON.stringify of the answer, as the service's sendJson.
    if (functionName === 'send') return 'serialisation (JSON.stringify)';
  }
  return SERVICE_FILES.find(([pattern]) => pattern.test(file ?? ''))?.[1] ?? 'other';
}

/** The stage of a sample: its nearest frame that has one, walking from the leaf to the root. */
export function sampleStage(stack: Frame[], root: string): Stage {
  for (const frame of stack) {
    const stage = stageOf(frame, root);
    if (stage) return stage;
  }
  return 'other: Node internals, timers, promises';
}

/** One profile's split, as tools/bench/profile.ts measures it. */
export interface StageProfile {
  endpoint: 'public' | 'authenticated';
  label: string;
  posts: number;
  connections: number;
  duration: number;
  measuredAt: string;
  node: string;
  /** Requests answered while the profile ran, and their rate (the profiler slows the service). */
  requests: number;
  rps: number;
  /** CPU time the profile saw busy (not idle), µs, and per stage. */
  busyUs: number;
  stages: Partial<Record<Stage, number>>;
  /** The machine's 1-minute load average when the profile ended (other work sharing the CPU). */
  loadAverage?: number;
}

const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** The split as a Markdown table, one column per profile. */
function stageLines(profiles: StageProfile[]): string[] {
  const name = (p: StageProfile) =>
    `${p.endpoint === 'public' ? 'public list' : 'signed-in list'}${p.label ? `, ${p.label}` : ''}`;
  const perRequest = (p: StageProfile, us: number) => us / Math.max(p.requests, 1);
  const used = STAGES.filter((s) => profiles.some((p) => (p.stages[s] ?? 0) > 0));
  return [
    `| Stage | ${profiles.map(name).join(' | ')} |`,
    `|---|${profiles.map(() => '---:').join('|')}|`,
    ...used.map(
      (s) =>
        `| ${s} | ${profiles
          .map((p) => {
            const us = p.stages[s] ?? 0;
            return `${fmt((100 * us) / Math.max(p.busyUs, 1), 1)} % (${fmt(perRequest(p, us))} µs)`;
          })
          .join(' | ')} |`,
    ),
    `| **CPU per request, all stages** | ${profiles.map((p) => `**${fmt(perRequest(p, p.busyUs))} µs** (${fmt(p.rps)} req/s profiled)`).join(' | ')} |`,
    `| load average (1 min) of the machine | ${profiles.map((p) => (p.loadAverage === undefined ? '–' : fmt(p.loadAverage, 2))).join(' | ')} |`,
  ];
}

/** The run's section: the stage table, its column named by the endpoint and `--label`. */
export function profileSection(p: StageProfile): string[] {
  return [
    "## A list request's CPU, stage by stage",
    '',
    `CPU profile of the service under load, per stage: share of the busy CPU time, and µs per request answered (${String(p.connections)} connections, ${String(p.duration)} s after a 1 s warm-up, \`sp_bench_${String(p.posts)}\`, Node ${p.node}).`,
    '',
    ...stageLines([p]),
    '',
  ];
}
