/**
 * `npm run k8s:local`: the local ingress emulation. Renders the chart, translates its Ingress
 * objects and the controller values into an nginx.conf, starts PostgreSQL, the API replicas and
 * nginx (each by its own pid, all torn down at the end, also on failure or Ctrl-C), runs the suite
 * through nginx and prints the proof table. Exit code: the suite's.
 *
 * `--gateway`: the chart renders HTTPRoutes and NGINX Gateway Fabric policies instead (adding
 * k8s-tests/values-e2e-gateway.yaml), and local/gateway-config.ts translates them, the Gateway of
 * k8s-tests/gateway.yaml and k8s-tests/nginx-gateway-fabric-values.yaml into the nginx.conf.
 *
 * The replicas are containers of the image `npm run image:build` made, under the rendered pod's
 * security context and limits (launcher.ts); `--processes` runs them as node processes from this
 * checkout instead, for machines without a container engine.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { ensureTools } from '../../scripts/tools';
import { engine, IMAGE, imageFacts, mb } from '../../scripts/image';
import { formatReport, readReport, type Report } from '../report';
import { INSPECT_SCRIPT } from '../suite/inspect';
import { Cluster } from './cluster';
import { BrokenEndpoint, brokenModes } from './broken-endpoint';
import { gatewayHost, translateGateway, type NginxGatewayFabricValues } from './gateway-config';
import { ContainerLauncher, containerPolicy, ProcessLauncher, type Launcher } from './launcher';
import { translate, type ControllerValues } from './nginx-config';
import { HEADERS_MORE_MODULE, Nginx } from './nginx';
import { postgresBin } from '../../testing/postgres';
import { Postgres } from './postgres';
import { freePort, stillRunning, stop } from './processes';
import { namespace, readRelease, renderChart, repoRoot, servesApi, type Release } from './release';

const startedAt = Date.now();
const gatewayMode = process.argv.includes('--gateway');
const runAsProcesses = process.argv.slice(2).includes('--processes');

function step(message: string): void {
  const seconds = ((Date.now() - startedAt) / 1000).toFixed(1).padStart(5);
  process.stdout.write(`[k8s:local ${seconds}s] ${message}\n`);
}

interface Running {
  tmp: string;
  postgres?: Postgres;
  nginx?: Nginx;
  cluster?: Cluster;
  control?: Server;
  broken?: BrokenEndpoint;
  jest?: ChildProcess;
}

const state: Running = { tmp: mkdtempSync(join(tmpdir(), 'social-posts-k8s-')) };
let tornDown: Promise<void> | undefined;

/** Stops everything the runner started, each by its own pid, newest first. */
function tearDown(): Promise<void> {
  tornDown ??= (async () => {
    step('tear-down');
    const { jest, control, broken, cluster, nginx, postgres } = state;
    if (jest?.pid !== undefined && jest.exitCode === null && jest.signalCode === null)
      process.kill(jest.pid, 'SIGTERM');
    control?.close();
    control?.closeAllConnections();
    await broken?.close();
    await cluster?.close().catch((error: unknown) => {
      step(`replicas: ${String(error)}`);
    });
    await nginx?.stop().catch((error: unknown) => {
      step(`nginx: ${String(error)}`);
    });
    await postgres?.stop().catch((error: unknown) => {
      step(`postgres: ${String(error)}`);
    });
    // Anything left (a start that failed half-way) goes by its pid as well.
    for (const managed of stillRunning()) await stop(managed, 'SIGKILL', 5000);
  })();
  return tornDown;
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    step(`${signal}: stopping`);
    void tearDown().finally(() => {
      step(`interrupted; logs kept in ${state.tmp}`);
      process.exit(130);
    });
  });
}

function controlServer(
  postgres: Postgres,
  cluster: Cluster,
  launcher: Launcher,
  onceEnv: Record<string, string>,
  more: Record<string, () => Promise<string>>,
): Promise<{ server: Server; url: string }> {
  const routes: Record<string, () => Promise<string>> = {
    ...more,
    // The container case: what the service's own process sees inside a running replica.
    'POST /replica/inspect': () => {
      const replica = cluster.replicas.find((r) => r.ready && !r.terminating);
      if (!replica) throw new Error('no ready replica');
      step(`inspect: node -e … inside ${replica.name}`);
      return Promise.resolve(launcher.exec(replica.name, ['node', '-e', INSPECT_SCRIPT]));
    },
    // The image as an operator might misconfigure it: no DB_HOSTNAME, so the embedded database.
    'POST /image/without-database': () => {
      if (!(launcher instanceof ContainerLauncher))
        throw new Error('no image: the replicas run as processes');
      const env = { ...onceEnv };
      delete env.DB_HOSTNAME;
      step('a container of the image without DB_HOSTNAME');
      return Promise.resolve(JSON.stringify(launcher.runOnce(env, 60_000)));
    },
    'POST /database/stop': async () => {
      await postgres.stop();
      step('PostgreSQL stopped (fast shutdown)');
      return 'stopped';
    },
    'POST /database/start': async () => {
      await postgres.start();
      step('PostgreSQL started');
      return 'started';
    },
    'POST /rollout': async () => {
      step('rollout: replacing the replicas one by one (maxSurge 1, maxUnavailable 0)');
      const { replaced } = await cluster.rollout();
      const text = replaced.map((r) => `${r.name} exit ${String(r.exit)}`).join(', ');
      step(`rollout done: ${text}`);
      // A replica that did not end its graceful shutdown with 0 was killed or crashed.
      if (replaced.some((r) => r.exit !== 0)) throw new Error(`rollout: ${text}`);
      // The SIGTERM reached the service itself (PID 1 in a container), which drained and said so.
      for (const { name } of replaced) {
        const log = readFileSync(join(state.tmp, 'replicas', `${name}.log`), 'utf8');
        if (!log.includes('shutdown started') || !log.includes('shutdown complete'))
          throw new Error(`rollout: ${name} exited without its graceful shutdown; see its log`);
      }
      return `replaced ${text}`;
    },
    'GET /restarts': () =>
      Promise.resolve(JSON.stringify({ restarts: cluster.restarts + cluster.unexpectedExits.length })),
  };
  const server = createServer((req, res) => {
    const route = routes[`${req.method ?? ''} ${req.url ?? ''}`];
    if (!route) {
      res.writeHead(404).end();
      return;
    }
    route().then(
      (body) => res.writeHead(200).end(body),
      (error: unknown) => res.writeHead(500).end(String(error)),
    );
  });
  return new Promise((resolvePromise) => {
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      resolvePromise({ server, url: `http://127.0.0.1:${port}` });
    });
  });
}

/** What the rendered pod says the container case must find inside a replica. */
function expectations(release: Release): Record<string, string> {
  const policy = containerPolicy(release.podSpec, release.container);
  return {
    K8S_EXPECT_UID: String(policy.user),
    K8S_EXPECT_GID: String(policy.group),
    K8S_EXPECT_WRITABLE: policy.mounts
      .filter((m) => !m.readOnly)
      .map((m) => m.path)
      .join(','),
    K8S_EXPECT_READ_ONLY_ROOT: String(policy.readOnlyRoot),
    K8S_EXPECT_MEMORY_LIMIT_BYTES: String(policy.memoryLimitBytes ?? ''),
  };
}

function runSuite(env: NodeJS.ProcessEnv): Promise<number> {
  const jestBin = require.resolve('jest/bin/jest', { paths: [repoRoot] });
  const child = spawn(process.execPath, [jestBin, '-c', 'k8s-tests/jest.config.js', '--runInBand'], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: 'inherit',
  });
  state.jest = child;
  return new Promise((resolvePromise) => {
    child.once('exit', (code) => {
      resolvePromise(code ?? 1);
    });
  });
}

async function main(): Promise<number> {
  const { tmp } = state;
  for (const [bin, hint] of [
    [process.env.NGINX_BIN ?? '/usr/sbin/nginx', 'apt-get install nginx'],
    [HEADERS_MORE_MODULE, 'apt-get install libnginx-mod-http-headers-more-filter'],
    [postgresBin('initdb'), 'apt-get install postgresql (or set PG_BIN)'],
  ] as const) {
    if (!existsSync(bin)) throw new Error(`${bin} is missing: ${hint}`);
  }
  if (process.getuid?.() !== 0)
    throw new Error('run as root: PostgreSQL runs as postgres and nginx as nobody');
  // Readable for the postgres and nobody users, which own their subfolders.
  chmodSync(tmp, 0o755);
  step(`work folder ${tmp}`);

  step(
    `render the chart: helm template with chart/values-dev.yaml + k8s-tests/values-e2e.yaml${gatewayMode ? ' + k8s-tests/values-e2e-gateway.yaml' : ''}`,
  );
  const objects = renderChart(ensureTools().helm, gatewayMode ? ['k8s-tests/values-e2e-gateway.yaml'] : []);
  const release: Release = readRelease(objects);
  const controllerValues = parse(
    readFileSync(join(repoRoot, 'k8s-tests/ingress-nginx-values.yaml'), 'utf8'),
  ) as ControllerValues;
  const host = gatewayMode ? gatewayHost(objects) : (release.ingresses[0]?.spec?.rules?.[0]?.host ?? '');
  if (gatewayMode)
    step(`HTTPRoutes for ${host} on the Gateway of k8s-tests/gateway.yaml, ${release.replicas} replicas`);
  else step(`${release.ingresses.length} Ingress objects for ${host}, ${release.replicas} replicas`);

  const listenPort = await freePort();
  const statusPort = await freePort();
  const prefix = join(tmp, 'nginx');
  let generation = 0;
  const readYaml = (file: string): unknown => parse(readFileSync(join(repoRoot, file), 'utf8'));
  // Both translations ask for a backend's ready endpoints; only the API's Service has any.
  const apiEndpoints = (endpoints: string[]) => (service: string, port: number | string) => {
    if (!servesApi(release, service, port))
      throw new Error(`backend ${service}:${String(port)} is not the API`);
    return endpoints;
  };
  const gatewayConf = (endpoints: string[]) =>
    translateGateway(
      objects,
      readYaml('k8s-tests/gateway.yaml') as Parameters<typeof translateGateway>[1],
      readYaml('k8s-tests/nginx-gateway-fabric-values.yaml') as NginxGatewayFabricValues,
      {
        prefix,
        listenPort,
        statusPort,
        generation,
        namespace,
        endpoints: apiEndpoints(endpoints),
      },
    );
  const nginxConf = (endpoints: string[]) =>
    gatewayMode
      ? gatewayConf(endpoints)
      : translate(release.ingresses, controllerValues, {
          prefix,
          listenPort,
          statusPort,
          generation,
          namespace,
          headersMoreModule: HEADERS_MORE_MODULE,
          endpoints: apiEndpoints(endpoints),
        });
  // Translate before starting anything: an unmodelled feature fails the run here.
  nginxConf([]);

  const logDir = join(tmp, 'replicas');
  mkdirSync(logDir);
  let launcher: Launcher;
  if (runAsProcesses) {
    step('build the service (tsc into the work folder; dist/ is left alone)');
    const build = join(tmp, 'build');
    const tsc = require.resolve('typescript/bin/tsc', { paths: [repoRoot] });
    execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', build], {
      cwd: repoRoot,
      stdio: 'inherit',
    });
    launcher = new ProcessLauncher(
      join(build, 'service/src/main.js'),
      join(repoRoot, 'node_modules'),
      logDir,
    );
  } else {
    let facts;
    try {
      facts = imageFacts();
    } catch {
      throw new Error(
        `no image ${IMAGE} (${engine().name}): run npm run image:build first, or use --processes`,
      );
    }
    launcher = new ContainerLauncher(containerPolicy(release.podSpec, release.container), logDir, {
      id: facts.id,
      size: mb(facts.size),
      base: facts.base,
    });
  }
  step(launcher.describe());

  const pgPort = await freePort();
  step(`PostgreSQL on 127.0.0.1:${pgPort} (initdb in the work folder; database ${release.database.name})`);
  state.postgres = new Postgres({
    dir: join(tmp, 'postgres'),
    port: pgPort,
    database: release.database.name,
    user: release.database.user,
    password: release.database.password,
  });
  await state.postgres.init();

  step(`nginx on 127.0.0.1:${listenPort} (no endpoints yet: 503)`);
  const nginx = new Nginx(prefix, statusPort);
  state.nginx = nginx;
  generation++;
  await nginx.start(nginxConf([]), generation);
  // The retry cases add a misbehaving endpoint next to the ready replicas; reloads go one at a time.
  const broken = new BrokenEndpoint(nginx.errorLog);
  state.broken = broken;
  let ready: string[] = [];
  let reloads: Promise<void> = Promise.resolve();
  const reload = () =>
    (reloads = reloads
      .catch(() => undefined)
      .then(async () => {
        generation++;
        await nginx.reload(nginxConf([...ready, ...broken.endpoints()]), generation);
      }));

  const cluster = new Cluster({
    release,
    launcher,
    logDir,
    database: { host: '127.0.0.1', port: pgPort },
    onEndpoints: async (endpoints) => {
      ready = endpoints;
      await reload();
      step(`endpoints: [${endpoints.join(', ')}] (nginx configuration generation ${generation})`);
    },
  });
  state.cluster = cluster;
  step(
    `${release.replicas} replicas with the rendered ConfigMap and Secret (PORT, DB_HOSTNAME, DB_PORT rewritten)`,
  );
  await Promise.all(Array.from({ length: release.replicas }, () => cluster.startReplica()));

  const endpointRoutes: Record<string, () => Promise<string>> = {
    // Resolves once every endpoint change so far is in nginx and its old workers are gone: a reload
    // lets a new connection land on an old worker for a moment, which the real controller (no
    // reload for endpoints) never does, so case 6 waits for it before its next request.
    'GET /endpoints/settled': async () => {
      await reloads;
      return 'settled';
    },
    'GET /broken-endpoint': () => Promise.resolve(JSON.stringify({ failures: broken.failures() })),
    'DELETE /broken-endpoint': async () => {
      await broken.close();
      await reload();
      return 'closed';
    },
  };
  for (const mode of brokenModes)
    endpointRoutes[`POST /broken-endpoint/${mode}`] = async () => {
      await broken.open(mode);
      await reload();
      step(`broken endpoint (${mode}) ${broken.endpoints().join('')} next to [${ready.join(', ')}]`);
      return broken.endpoints().join('');
    };
  const control = await controlServer(
    state.postgres,
    cluster,
    launcher,
    {
      ...release.env,
      DB_HOSTNAME: '127.0.0.1',
      DB_PORT: String(pgPort),
    },
    endpointRoutes,
  );
  state.control = control.server;
  const reportFile = join(tmp, 'report.json');
  step('the suite, through nginx');
  const code = await runSuite({
    K8S_BASE_URL: `http://127.0.0.1:${listenPort}`,
    K8S_HOST: host,
    K8S_ALLOWED_ORIGINS: release.env.CORS_ALLOWED_ORIGINS ?? '',
    K8S_DRIVER: 'local',
    K8S_PROXY: gatewayMode ? 'nginx-gateway-fabric' : 'ingress-nginx',
    K8S_CONTROL_URL: control.url,
    K8S_REPORT_FILE: reportFile,
    K8S_PROBE_WINDOW_SECONDS: String(
      release.readiness.periodSeconds * release.readiness.failureThreshold + 1,
    ),
    K8S_RUNTIME: launcher.kind,
    ...expectations(release),
  });
  if (cluster.unexpectedExits.length > 0) step(`unexpected exits: ${cluster.unexpectedExits.join('; ')}`);
  // Memory is read before the replicas stop; the figures go into the proof table.
  for (const replica of cluster.replicas) cluster.recordMemory(replica);
  let report: Report | undefined;
  try {
    report = readReport(reportFile);
  } catch {
    step('no report was written');
  }
  if (report) {
    const policy =
      launcher.kind === 'containers' ? containerPolicy(release.podSpec, release.container) : undefined;
    report.runtime = {
      launcher: launcher.describe(),
      memoryLimitBytes: policy?.memoryLimitBytes,
      replicas: [...cluster.figures.values()],
    };
    process.stdout.write(`\n${formatReport(report)}\n\n`);
  }
  return code;
}

main()
  .catch((error: unknown) => {
    step(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return 1;
  })
  .then(async (code) => {
    await tearDown();
    if (code === 0) rmSync(state.tmp, { recursive: true, force: true });
    else step(`logs kept in ${state.tmp}`);
    step(code === 0 ? 'passed' : 'FAILED');
    process.exit(code);
  })
  .catch(() => process.exit(1));
