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
 *
 * Upgrade (the default on the Ingress path with containers; `--upgrade` on the Gateway path too,
 * `--no-upgrade` never): the replicas start from the previous release's image (`npm run
 * image:previous`), so the database gets that release's schema, and the suite's first case changes
 * the Deployment's image to this release's; the other cases then run on this release.
 *
 * `--from-registry` (containers only): installs as an operator does from a published release. The
 * image is released into a registry on a local port (`npm run release`), the chart pulled back with
 * `helm pull --verify` and rendered from its package, and the image it names pulled by digest
 * (local/from-registry.ts); the replicas run that reference.
 *
 * The database is the production topology (k8s-tests/values-e2e-cnpg.yaml turns cnpg.enabled on):
 * the replicas dial the rendered Pooler's Service over TLS verified against the cluster's CA, and
 * local/cnpg.ts runs what CloudNativePG would: PgBouncer 1.24.1 configured from the rendered Pooler,
 * in front of a primary with a synchronous standby. `--in-chart-database` runs the dev topology
 * instead: one PostgreSQL standing in for the chart's StatefulSet.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTools } from '../../tools/tools';
import { engine, IMAGE, imageExists, imageFacts, mb, previousImage } from '../../tools/container';
import { formatReport } from '../report';
import { Cluster, databaseEnv, type Address } from './cluster';
import type { BrokenEndpoint } from './broken-endpoint';
import { startControlServer } from './control';
import type { DatabaseControl } from '../suite/drivers';
import { gatewayHost, translateGateway } from './gateway-config';
import { ContainerLauncher, containerPolicy, ProcessLauncher, type Launcher } from './launcher';
import { translate, type ControllerValues } from './nginx-config';
import { EmulatedProxy, HEADERS_MORE_MODULE, type Nginx } from './nginx';
import { ownForPostgres, OwnPostgres, postgresBin, runPostgresTool } from '../../tools/harness/postgres';
import { KubeStateMetrics, Prometheus, PROMETHEUS_BIN } from './prometheus';
import { CnpgStandIn, cnpgObjects } from './cnpg';
import { installFromRegistry, pullImage, type Installed } from './from-registry';
import type { Registry } from '../../tools/harness/registry';
import { stillRunning, stop } from '../../tools/harness/processes';
import { freePort } from '../../tools/harness/service';
import {
  gatewayInputs,
  namespace,
  readRelease,
  readYaml,
  releaseName,
  renderChart,
  repoRoot,
  servesApi,
  type KubeObject,
  type Release,
} from './release';

const startedAt = Date.now();
const flag = (name: string) => process.argv.slice(2).includes(`--${name}`);
const gatewayMode = flag('gateway');
const runAsProcesses = flag('processes');
const inChartDatabase = flag('in-chart-database');
const fromRegistry = flag('from-registry');
const upgradeFromPrevious = flag('upgrade') || (!flag('no-upgrade') && !gatewayMode && !runAsProcesses);
/** How long after the primary's loss the stand-in promotes the standby (the operator's detection and election). */
const FAILOVER_DETECTION_MS = Number(process.env.K8S_FAILOVER_DETECTION_SECONDS ?? 3) * 1000;

function step(message: string): void {
  const seconds = ((Date.now() - startedAt) / 1000).toFixed(1).padStart(5);
  process.stdout.write(`[k8s:local ${seconds}s] ${message}\n`);
}

interface Running {
  tmp: string;
  postgres?: OwnPostgres;
  cnpg?: CnpgStandIn;
  nginx?: Nginx;
  cluster?: Cluster;
  control?: Server;
  broken?: BrokenEndpoint;
  prometheus?: Prometheus;
  kubeStateMetrics?: KubeStateMetrics;
  jest?: ChildProcess;
  registry?: Registry;
}

const state: Running = { tmp: mkdtempSync(join(tmpdir(), 'social-posts-k8s-')) };
let tornDown: Promise<void> | undefined;

/** Waits for one part to stop; a failure is logged, so that the parts after it still stop. */
async function stopPart(part: string, stopping: () => unknown): Promise<void> {
  try {
    await stopping();
  } catch (error) {
    step(`${part}: ${String(error)}`);
  }
}

/** Stops everything the runner started, each by its own pid, newest first. */
function tearDown(): Promise<void> {
  tornDown ??= (async () => {
    step('tear-down');
    const { jest, control, broken, cluster, nginx, postgres, cnpg, prometheus, kubeStateMetrics, registry } =
      state;
    if (jest?.pid !== undefined && jest.exitCode === null && jest.signalCode === null)
      process.kill(jest.pid, 'SIGTERM');
    control?.close();
    control?.closeAllConnections();
    await broken?.close();
    await stopPart('prometheus', () => prometheus?.stop());
    kubeStateMetrics?.close();
    await stopPart('replicas', () => cluster?.close());
    await stopPart('nginx', () => nginx?.stop());
    // Stopped, not destroyed: its log stays in the work folder.
    await stopPart('postgres', () => {
      if (postgres?.running()) postgres.stop();
    });
    await stopPart('cnpg', () => cnpg?.close());
    await stopPart('registry', () => registry?.stop());
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

/** What the rendered pod says the container case must find inside a replica. */
function expectations(release: Release): Record<string, string> {
  const policy = containerPolicy(release);
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
  const child = spawn(process.execPath, [jestBin, '--selectProjects', 'k8s', '--runInBand', '--verbose'], {
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

/** What the run needs of this machine: it fails at once, naming what is missing. */
function checkPrerequisites(): void {
  for (const [bin, hint] of [
    [process.env.NGINX_BIN ?? '/usr/sbin/nginx', 'apt-get install nginx'],
    [HEADERS_MORE_MODULE, 'apt-get install libnginx-mod-http-headers-more-filter'],
    [postgresBin('initdb'), 'apt-get install postgresql (or set PG_BIN)'],
    [PROMETHEUS_BIN, 'apt-get install prometheus (or set PROMETHEUS_BIN)'],
  ] as const) {
    if (!existsSync(bin)) throw new Error(`${bin} is missing: ${hint}`);
  }
  if (process.getuid?.() !== 0)
    throw new Error('run as root: PostgreSQL runs as postgres and nginx as nobody');
}

/**
 * CloudNativePG's stand-in for the rendered Cluster and Poolers (local/cnpg.ts); the rw Pooler's
 * port, 0 when the release renders none (the in-chart database).
 */
async function startCnpg(objects: KubeObject[], tmp: string): Promise<number> {
  const rendered = cnpgObjects(objects);
  if (!rendered) return 0;
  const { cluster, pooler, readPooler, archiving } = rendered;
  step(
    `CloudNativePG stand-in for Cluster ${cluster.metadata.name} and Pooler ${pooler.metadata.name}${readPooler ? ` and ro Pooler ${readPooler.metadata.name}` : ''}: CA and server certificate, primary + synchronous standby, PgBouncer 1.24.1 (${pooler.spec.pgbouncer.poolMode})`,
  );
  if (archiving)
    step(
      `Barman Cloud plugin stand-in: WAL archived to ${archiving.settings.destinationPath}/${archiving.settings.serverName} at ${archiving.settings.endpointUrl} (s3rver), archive_timeout ${archiving.archiveTimeout}${archiving.scheduled ? ", base backups on the suite's request" : ''}`,
    );
  // Processes cannot resolve the Pooler's Service name; they dial localhost, which the certificate adds.
  state.cnpg = new CnpgStandIn(
    cluster,
    pooler,
    namespace,
    tmp,
    runAsProcesses ? ['localhost'] : [],
    archiving,
    readPooler,
    FAILOVER_DETECTION_MS,
  );
  const poolerPort = await state.cnpg.start();
  step(
    `Pooler on 127.0.0.1:${poolerPort}${state.cnpg.readPoolerPort ? `, ro Pooler on 127.0.0.1:${state.cnpg.readPoolerPort}` : ''}, instances on ${state.cnpg.instances.primaryPort} (primary) and ${state.cnpg.instances.standbyPort} (standby)`,
  );
  return poolerPort;
}

/** The emulated kubelet's runtime: containers of the image, or with --processes this checkout built. */
function makeLauncher(release: Release, tmp: string, logDir: string): Launcher {
  if (runAsProcesses) {
    step('build the service (tsc into the work folder; dist/ is left alone)');
    const build = join(tmp, 'build');
    const tsc = require.resolve('typescript/bin/tsc', { paths: [repoRoot] });
    execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', build], {
      cwd: repoRoot,
      stdio: 'inherit',
    });
    // The pod's Secret volumes as host folders: a setting naming one of their files points there.
    const mounted: Record<string, string> = {};
    for (const mount of containerPolicy(release).mounts) {
      if (!mount.files) continue;
      const dir = join(tmp, 'mounts', mount.volume);
      mkdirSync(dir, { recursive: true });
      for (const [file, content] of Object.entries(mount.files)) writeFileSync(join(dir, file), content);
      mounted[mount.path] = dir;
    }
    return new ProcessLauncher(
      join(build, 'service/src/main.js'),
      join(repoRoot, 'node_modules'),
      logDir,
      mounted,
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
    return new ContainerLauncher(
      containerPolicy(release),
      logDir,
      { id: facts.id, size: mb(facts.size), base: facts.base },
      // The Pooler's Service name, as cluster DNS would resolve it: the TLS check sees that name.
      release.cnpg
        ? {
            [release.database.host]: '127.0.0.1',
            ...(release.readDatabase ? { [release.readDatabase.host]: '127.0.0.1' } : {}),
          }
        : {},
    );
  }
}

/** The database's control, and the addresses the replicas dial for it (and for reads on standbys). */
interface Database {
  database: DatabaseControl;
  dbAddress: Address;
  readAddress?: Address;
}

/**
 * The database the replicas dial and what the suite may do to it: CloudNativePG's stand-in (its
 * Pooler, failover, standby and backups) or, with the in-chart database, one PostgreSQL.
 */
async function databaseFor(release: Release, poolerPort: number, tmp: string): Promise<Database> {
  const standIn = state.cnpg;
  if (standIn) {
    const named = (host: string) => (runAsProcesses ? 'localhost' : host);
    const readPort = standIn.readPoolerPort;
    return {
      database: standIn,
      dbAddress: { host: named(release.database.host), port: poolerPort },
      ...(release.readDatabase && readPort
        ? { readAddress: { host: named(release.readDatabase.host), port: readPort } }
        : {}),
    };
  }
  // The chart's StatefulSet runs the postgres image: its user is the superuser, scram over TCP.
  const { name, user, password } = release.database;
  const passwordFile = join(tmp, 'postgres-password');
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  ownForPostgres(passwordFile);
  const dir = join(tmp, 'postgres');
  mkdirSync(dir, { mode: 0o700 });
  const initdb = [
    `--pwfile=${passwordFile}`,
    '--auth-local=trust',
    '--auth-host=scram-sha-256',
    '--locale=C',
  ];
  const postgres = new OwnPostgres({ dir, user, initdb });
  state.postgres = postgres;
  await postgres.init();
  postgres.start();
  // The postgres image creates POSTGRES_DB on first start; so does the runner.
  runPostgresTool('createdb', ['-h', dir, '-p', String(postgres.port), '-U', user, name]);
  step(`PostgreSQL on 127.0.0.1:${postgres.port} (initdb in the work folder; database ${name})`);
  return {
    database: {
      stopDatabase: () => {
        postgres.stop();
      },
      startDatabase: () => {
        postgres.start();
      },
    },
    dbAddress: { host: '127.0.0.1', port: postgres.port },
  };
}

/** A replica's pod name in the metrics, as the emulated cluster names it. */
const podName = (replica: { name: string }) => `${releaseName}-local-${replica.name.replace(/\W/g, '')}`;

async function startMonitoring(release: Release, tmp: string): Promise<Prometheus> {
  // Monitoring: a kube-state-metrics stand-in reading the emulated cluster, and Prometheus scraping
  // it and every running replica's metrics port with the ServiceMonitor's target labels.
  const { memoryLimitBytes } = containerPolicy(release);
  const kubeStateMetrics = new KubeStateMetrics(() => {
    const running = state.cluster?.replicas.filter((r) => !r.process.hasExited()) ?? [];
    return {
      namespace,
      deployment: releaseName,
      container: release.container.name,
      desired: release.replicas,
      available: running.filter((r) => r.ready).length,
      pods: running.map((r) => ({ pod: podName(r), restarts: r.restarts })),
      memoryLimitBytes,
    };
  });
  state.kubeStateMetrics = kubeStateMetrics;
  await kubeStateMetrics.start();
  const metricsPortName =
    release.service.spec?.ports?.find((p) => p.targetPort === 'metrics')?.name ?? 'metrics';
  const prometheus = new Prometheus(join(tmp, 'prometheus'), {
    name: releaseName,
    namespace,
    container: release.container.name,
    port: metricsPortName,
  });
  state.prometheus = prometheus;
  await prometheus.start(kubeStateMetrics.port);
  step(
    `Prometheus on ${prometheus.url} (Debian's ${PROMETHEUS_BIN}): scrapes every replica's metrics port with the ServiceMonitor's labels and a kube-state-metrics stand-in on 127.0.0.1:${kubeStateMetrics.port}, every second`,
  );
  return prometheus;
}

/** The runtime's figures beside the suite's in the report folder, printed as the proof table. */
function printReport(dir: string, cluster: Cluster, launcher: Launcher, release: Release): void {
  if (cluster.unexpectedExits.length > 0) step(`unexpected exits: ${cluster.unexpectedExits.join('; ')}`);
  // Memory is read before the replicas stop; the figures go into the proof table.
  for (const replica of cluster.replicas) cluster.recordMemory(replica);
  const runtime = {
    launcher: launcher.describe(),
    memoryLimitBytes: launcher.kind === 'containers' ? containerPolicy(release).memoryLimitBytes : undefined,
    replicas: [...cluster.figures.values()],
  };
  writeFileSync(join(dir, 'runtime.json'), JSON.stringify(runtime, null, 2));
  process.stdout.write(`\n${formatReport(dir)}\n\n`);
}

/**
 * The nginx.conf of the proxy being emulated, for the API's ready endpoints at a generation: the
 * chart's HTTPRoutes as NGINX Gateway Fabric writes them (--gateway), else its Ingresses as
 * ingress-nginx does.
 */
function proxyConf(
  objects: KubeObject[],
  release: Release,
  where: { prefix: string; listenPort: number; statusPort: number },
): (endpoints: string[], generation: number) => string {
  const controllerValues = readYaml('k8s-tests/ingress-nginx-values.yaml') as ControllerValues;
  const gateway = gatewayMode ? gatewayInputs() : undefined;
  // Both translations ask for a backend's ready endpoints; only the API's Service has any.
  const apiEndpoints = (endpoints: string[]) => (service: string, port: number | string) => {
    if (!servesApi(release, service, port))
      throw new Error(`backend ${service}:${String(port)} is not the API`);
    return endpoints;
  };
  return (endpoints, generation) => {
    const settings = { ...where, generation, namespace, endpoints: apiEndpoints(endpoints) };
    return gateway
      ? translateGateway(objects, gateway.gateway, gateway.values, settings)
      : translate(release.ingresses, controllerValues, {
          ...settings,
          headersMoreModule: HEADERS_MORE_MODULE,
        });
  };
}

/** The chart rendered as the run installs it, with CloudNativePG's stand-in started for its Secrets. */
interface Rendered {
  /** The values files beyond the e2e ones; the backup case renders with them again. */
  extraValues: string[];
  installed?: Installed;
  objects: KubeObject[];
  release: Release;
  host: string;
  /** The rw Pooler's port, 0 with the in-chart database. */
  poolerPort: number;
}

async function renderRelease(tmp: string): Promise<Rendered> {
  const extraValues = [
    // The ServiceMonitor, PrometheusRule and dashboard: the metrics case queries what they render.
    'k8s-tests/values-e2e-metrics.yaml',
    ...(gatewayMode ? ['k8s-tests/values-e2e-gateway.yaml'] : []),
    ...(inChartDatabase ? [] : ['k8s-tests/values-e2e-cnpg.yaml']),
  ];
  if (fromRegistry && runAsProcesses)
    throw new Error('--from-registry runs the published image: the replicas run as processes (--processes)');
  const installed = fromRegistry ? await installFromRegistry(tmp, step) : undefined;
  if (installed) state.registry = installed.registry;
  step(
    `render the chart${installed ? ' pulled from the registry' : ''}: helm template with chart/values-dev.yaml + k8s-tests/values-e2e.yaml${extraValues.map((f) => ` + ${f}`).join('')}`,
  );
  const objects = renderChart(ensureTools().helm, extraValues, {}, installed?.chart);
  // CloudNativePG first: its Secrets (the owner's password, the CA) are part of the pods' settings.
  const poolerPort = await startCnpg(objects, tmp);
  const release: Release = readRelease(objects, state.cnpg?.secrets() ?? []);
  const host = gatewayMode ? gatewayHost(objects) : (release.ingresses[0]?.spec?.rules?.[0]?.host ?? '');
  if (gatewayMode)
    step(`HTTPRoutes for ${host} on the Gateway of k8s-tests/gateway.yaml, ${release.replicas} replicas`);
  else step(`${release.ingresses.length} Ingress objects for ${host}, ${release.replicas} replicas`);
  return { extraValues, ...(installed ? { installed } : {}), objects, release, host, poolerPort };
}

/** What the replicas run on and from which image, with the upgrade case's images when it runs. */
interface Runtime {
  logDir: string;
  launcher: Launcher;
  releaseImage: string;
  upgrade?: { from: string; to: string };
}

function prepareRuntime({ release, installed }: Rendered, tmp: string): Runtime {
  const logDir = join(tmp, 'replicas');
  mkdirSync(logDir);
  if (upgradeFromPrevious && runAsProcesses)
    throw new Error('--upgrade needs the images: the replicas run as processes (--processes)');
  // Installed from the registry, the Deployment names the image by digest; else the local build.
  const releaseImage = installed ? (release.container.image ?? '') : IMAGE;
  if (installed) pullImage(releaseImage, step);
  const upgrade = upgradeFromPrevious ? { from: previousImage(), to: releaseImage } : undefined;
  if (upgrade && !imageExists(upgrade.from))
    throw new Error(`no image ${upgrade.from}: run npm run image:previous first, or use --no-upgrade`);
  const launcher = makeLauncher(release, tmp, logDir);
  step(launcher.describe());
  if (upgrade)
    step(`upgrade case: the replicas start from ${upgrade.from}, the suite upgrades them to ${upgrade.to}`);
  return { logDir, launcher, releaseImage, ...(upgrade ? { upgrade } : {}) };
}

async function startProxy(
  tmp: string,
  listenPort: number,
  statusPort: number,
  conf: (endpoints: string[], generation: number) => string,
): Promise<EmulatedProxy> {
  step(`nginx on 127.0.0.1:${listenPort} (no endpoints yet: 503)`);
  const proxy = new EmulatedProxy(join(tmp, 'nginx'), statusPort, conf);
  state.nginx = proxy.nginx;
  state.broken = proxy.broken;
  await proxy.start();
  return proxy;
}

/** The emulated Deployment's replicas, feeding Prometheus its targets and the proxy its endpoints. */
async function startReplicas(
  { installed, release }: Rendered,
  { launcher, logDir, releaseImage, upgrade }: Runtime,
  db: Database,
  proxy: EmulatedProxy,
  prometheus: Prometheus,
): Promise<Cluster> {
  const cluster = new Cluster({
    release,
    launcher,
    logDir,
    database: db.dbAddress,
    ...(db.readAddress ? { readDatabase: db.readAddress } : {}),
    ...(upgrade ? { image: upgrade.from } : installed ? { image: releaseImage } : {}),
    onReplicas: (replicas) => {
      prometheus.setTargets(
        replicas.map((r) => ({ address: `127.0.0.1:${r.metricsPort}`, pod: podName(r) })),
      );
    },
    onEndpoints: async (endpoints) => {
      proxy.ready = endpoints;
      await proxy.reload();
      step(`endpoints: [${endpoints.join(', ')}] (nginx configuration generation ${proxy.generation})`);
    },
  });
  state.cluster = cluster;
  step(
    `${release.replicas} replicas with the rendered ConfigMap and Secrets (PORT, DB_PORT${release.cnpg && !runAsProcesses ? '' : ', DB_HOSTNAME'} rewritten)`,
  );
  await Promise.all(Array.from({ length: release.replicas }, () => cluster.startReplica()));
  return cluster;
}

/** The control server through which the cases stop, fail over and upgrade what runs here. */
async function startControl(
  release: Release,
  { launcher, logDir, upgrade }: Runtime,
  { database, dbAddress, readAddress }: Database,
  proxy: EmulatedProxy,
  cluster: Cluster,
): Promise<string> {
  const control = await startControlServer({
    database,
    cluster,
    launcher,
    logDir,
    onceEnv: { ...release.env, ...databaseEnv(dbAddress, readAddress) },
    proxy,
    step,
    ...(upgrade ? { upgrade } : {}),
  });
  state.control = control.server;
  return control.url;
}

/** The suite through the proxy, told by environment what runs here; its exit code. */
function runCases(
  tmp: string,
  { extraValues, installed, objects, release, host }: Rendered,
  { launcher, upgrade }: Runtime,
  urls: { base: string; control: string; prometheus: string },
  readAddress: Address | undefined,
  reportDir: string,
): Promise<number> {
  const renderedFile = join(tmp, 'rendered.json');
  writeFileSync(renderedFile, JSON.stringify(objects));
  step('the suite, through nginx');
  return runSuite({
    K8S_BASE_URL: urls.base,
    K8S_HOST: host,
    K8S_ALLOWED_ORIGINS: release.env.CORS_ALLOWED_ORIGINS ?? '',
    K8S_DRIVER: 'local',
    K8S_PROXY: gatewayMode ? 'nginx-gateway-fabric' : 'ingress-nginx',
    K8S_CONTROL_URL: urls.control,
    K8S_REPORT_DIR: reportDir,
    K8S_PROMETHEUS_URL: urls.prometheus,
    K8S_RENDERED_FILE: renderedFile,
    // The backup case renders the chart again with these and the recovery values.
    K8S_VALUES_FILES: extraValues.join(','),
    ...(installed ? { K8S_CHART: installed.chart } : {}),
    ...(state.cnpg?.backups ? { K8S_BACKUP: 'plugin' } : {}),
    ...(readAddress ? { K8S_STANDBY_READS: '1' } : {}),
    ...(upgrade ? { K8S_UPGRADE_FROM: upgrade.from, K8S_UPGRADE_TO: upgrade.to } : {}),
    K8S_PROBE_WINDOW_SECONDS: String(
      release.readiness.periodSeconds * release.readiness.failureThreshold + 1,
    ),
    K8S_RUNTIME: launcher.kind,
    K8S_DATABASE: release.cnpg ? 'cnpg' : 'in-chart',
    ...expectations(release),
  });
}

/** Each step records in `state` what it started, so tearDown stops it whichever step fails. */
async function main(): Promise<number> {
  const { tmp } = state;
  checkPrerequisites();
  // Readable for the postgres and nobody users, which own their subfolders.
  chmodSync(tmp, 0o755);
  step(`work folder ${tmp}`);

  const rendered = await renderRelease(tmp);
  const { release } = rendered;
  const listenPort = await freePort();
  const statusPort = await freePort();
  const conf = proxyConf(rendered.objects, release, { prefix: join(tmp, 'nginx'), listenPort, statusPort });
  // Translate before starting anything: an unmodelled feature fails the run here.
  conf([], 0);

  const runtime = prepareRuntime(rendered, tmp);
  const db = await databaseFor(release, rendered.poolerPort, tmp);
  const proxy = await startProxy(tmp, listenPort, statusPort, conf);
  const prometheus = await startMonitoring(release, tmp);
  const cluster = await startReplicas(rendered, runtime, db, proxy, prometheus);
  const controlUrl = await startControl(release, runtime, db, proxy, cluster);

  const reportDir = join(tmp, 'report');
  mkdirSync(reportDir);
  const urls = { base: `http://127.0.0.1:${listenPort}`, control: controlUrl, prometheus: prometheus.url };
  const code = await runCases(tmp, rendered, runtime, urls, db.readAddress, reportDir);
  printReport(reportDir, cluster, runtime.launcher, release);
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
