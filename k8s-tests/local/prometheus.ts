/**
 * Monitoring as the chart's ServiceMonitor and kube-prometheus-stack would have it, for the local
 * emulation: Debian's Prometheus (`apt-get install prometheus`; PROMETHEUS_BIN elsewhere) run by its
 * own pid on a free port, scraping
 * - every running replica's metrics port, with the target labels the Prometheus Operator gives a
 *   ServiceMonitor's endpoints (job and service = the Service's name, namespace, pod, container,
 *   endpoint = the port's name), from a file_sd file the runner rewrites as replicas come and go;
 * - a kube-state-metrics stand-in (KubeStateMetrics below) with `honor_labels`, as
 *   kube-prometheus-stack scrapes the real one.
 * Every second, so that rate() over the chart's windows has points within a short run.
 */
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { startLogged, stop, type Managed } from '../../tools/harness/processes';
import { freePort, listenLocal } from '../../tools/harness/service';
import { waitFor } from '../../tools/harness/poll';

export const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN ?? '/usr/bin/prometheus';
const SCRAPE_INTERVAL_SECONDS = 1;

/** What the stand-in reads from the emulated cluster at each scrape. */
export interface ClusterState {
  namespace: string;
  deployment: string;
  container: string;
  desired: number;
  available: number;
  pods: { pod: string; restarts: number }[];
  memoryLimitBytes?: number;
}

const label = (value: string) => JSON.stringify(value);

/**
 * The kube-state-metrics series the chart's alerts and dashboard read, computed from the emulated
 * cluster the way kube-state-metrics v2 computes them from the API objects. A container that is not
 * waiting has no kube_pod_container_status_waiting_reason series (as in kube-state-metrics v2).
 */
function kubeStateMetrics(state: ClusterState): string {
  const deployment = `namespace=${label(state.namespace)},deployment=${label(state.deployment)}`;
  const lines = [
    '# TYPE kube_deployment_spec_replicas gauge',
    `kube_deployment_spec_replicas{${deployment}} ${state.desired}`,
    '# TYPE kube_deployment_status_replicas_available gauge',
    `kube_deployment_status_replicas_available{${deployment}} ${state.available}`,
    '# TYPE kube_pod_container_status_restarts_total counter',
  ];
  const container = (pod: string) =>
    `namespace=${label(state.namespace)},pod=${label(pod)},uid=${label(pod)},container=${label(state.container)}`;
  for (const pod of state.pods)
    lines.push(`kube_pod_container_status_restarts_total{${container(pod.pod)}} ${pod.restarts}`);
  if (state.memoryLimitBytes !== undefined) {
    lines.push('# TYPE kube_pod_container_resource_limits gauge');
    for (const pod of state.pods)
      lines.push(
        `kube_pod_container_resource_limits{${container(pod.pod)},node="local",resource="memory",unit="byte"} ${state.memoryLimitBytes}`,
      );
  }
  return `${lines.join('\n')}\n`;
}

export class KubeStateMetrics {
  private server: Server | undefined;
  port = 0;

  constructor(private readonly read: () => ClusterState) {}

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' }).end(kubeStateMetrics(this.read()));
    });
    this.port = await listenLocal(this.server);
  }

  close(): void {
    this.server?.close();
    this.server?.closeAllConnections();
  }
}

export class Prometheus {
  private server: Managed | undefined;
  port = 0;
  private readonly targetsFile: string;

  constructor(
    private readonly dir: string,
    private readonly service: { name: string; namespace: string; container: string; port: string },
  ) {
    this.targetsFile = join(dir, 'api-targets.json');
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The replicas to scrape, with the labels the Operator would give each endpoint. */
  setTargets(targets: { address: string; pod: string }[]): void {
    const groups = targets.map((target) => ({
      targets: [target.address],
      labels: {
        job: this.service.name,
        namespace: this.service.namespace,
        service: this.service.name,
        pod: target.pod,
        container: this.service.container,
        endpoint: this.service.port,
      },
    }));
    // Written whole, then renamed: Prometheus never reads half a file.
    const partial = `${this.targetsFile}.partial`;
    writeFileSync(partial, JSON.stringify(groups));
    renameSync(partial, this.targetsFile);
  }

  async start(kubeStateMetricsPort: number): Promise<void> {
    if (!existsSync(PROMETHEUS_BIN))
      throw new Error(`${PROMETHEUS_BIN} is missing: apt-get install prometheus (or set PROMETHEUS_BIN)`);
    mkdirSync(this.dir, { recursive: true });
    if (!existsSync(this.targetsFile)) this.setTargets([]);
    const interval = `${SCRAPE_INTERVAL_SECONDS}s`;
    const config = {
      global: { scrape_interval: interval, scrape_timeout: interval, evaluation_interval: interval },
      scrape_configs: [
        {
          // Each target's own job label (the Service's name) wins over this name.
          job_name: 'serviceMonitor/api',
          metrics_path: '/metrics',
          file_sd_configs: [{ files: [this.targetsFile], refresh_interval: interval }],
        },
        {
          job_name: 'kube-state-metrics',
          honor_labels: true,
          static_configs: [{ targets: [`127.0.0.1:${kubeStateMetricsPort}`] }],
        },
      ],
    };
    const configFile = join(this.dir, 'prometheus.yml');
    writeFileSync(configFile, stringify(config));
    this.port = await freePort();
    this.server = startLogged(
      'prometheus',
      PROMETHEUS_BIN,
      [
        `--config.file=${configFile}`,
        `--storage.tsdb.path=${join(this.dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${this.port}`,
        '--storage.tsdb.retention.time=1d',
        '--log.level=warn',
      ],
      join(this.dir, 'prometheus.log'),
    );
    const server = this.server;
    await waitFor('Prometheus to be ready', 60_000, async () => {
      if (server.hasExited()) throw new Error(`prometheus exited; see ${join(this.dir, 'prometheus.log')}`);
      try {
        return (await fetch(`${this.url}/-/ready`, { signal: AbortSignal.timeout(2000) })).ok;
      } catch {
        return false;
      }
    });
  }

  async stop(): Promise<void> {
    if (this.server) await stop(this.server, 'SIGTERM', 10_000);
  }
}
