/**
 * What the Barman Cloud plugin v0.14.0 would do for the rendered backup objects, on this machine:
 * archive the primary's WAL and take base backups into the ObjectStore the Cluster's spec.plugins
 * entry names (isWALArchiver), with the settings read from the rendered objects (destinationPath,
 * endpointURL, the s3Credentials' Secret keys, wal.compression, data.compression/jobs/
 * immediateCheckpoint, the entry's serverName or the Cluster's name, postgresql.parameters'
 * archive_timeout), through the same tools and arguments (tools/harness/barman.ts). The store is s3rver on
 * the rendered endpointURL; its credentials go into the Secret the ObjectStore names, and the tools
 * read them from there. A recovery Cluster (bootstrap.recovery from an externalClusters entry read
 * through the plugin) is restored into a new server that archives to its own serverName.
 */
import { OwnPostgres } from '../../tools/harness/postgres';
import {
  archiveNow,
  archivingSettings,
  CNPG_DEFAULT_ARCHIVE_TIMEOUT,
  COMPRESSIONS,
  listBackups,
  recoverServer,
  splitDestination,
  storedBytes,
  takeBaseBackup,
  type BackupInfo,
  type BarmanSettings,
  type Compression,
  type Instance,
  type RecoveryRun,
} from '../../tools/harness/barman';
import { ObjectStore } from '../../tools/harness/object-store';
import { secretObject, type KubeObject } from '../../tools/harness/manifests';

const BARMAN_PLUGIN = 'barman-cloud.cloudnative-pg.io';

interface SecretKeyRef {
  name: string;
  key: string;
}

export interface ObjectStoreObject extends KubeObject {
  spec: {
    configuration: {
      destinationPath: string;
      endpointURL?: string;
      endpointCA?: SecretKeyRef;
      s3Credentials?: {
        accessKeyId?: SecretKeyRef;
        secretAccessKey?: SecretKeyRef;
        region?: SecretKeyRef;
        sessionToken?: SecretKeyRef;
        inheritFromIAMRole?: boolean;
      };
      azureCredentials?: unknown;
      googleCredentials?: unknown;
      wal?: { compression?: string };
      data?: { compression?: string; jobs?: number; immediateCheckpoint?: boolean };
    };
  };
}

export interface PluginEntry {
  name: string;
  enabled?: boolean;
  isWALArchiver?: boolean;
  parameters?: Record<string, string>;
}

/** The parts of a Cluster the plugin reads. */
export interface BackedUpCluster extends KubeObject {
  spec: {
    plugins?: PluginEntry[];
    postgresql?: { parameters?: Record<string, string> };
    bootstrap?: {
      initdb?: unknown;
      recovery?: { source: string; database?: string; recoveryTarget?: { targetTime?: string } };
    };
    externalClusters?: { name: string; plugin?: PluginEntry }[];
  };
}

interface ScheduledBackupObject extends KubeObject {
  spec: { cluster: { name: string }; method?: string; pluginConfiguration?: { name: string } };
}

/** How a Cluster archives, as the plugin reads it from the rendered objects. */
export interface Archiving {
  objectStore: ObjectStoreObject;
  settings: BarmanSettings;
  archiveTimeout: string;
  /** A ScheduledBackup (method plugin) is rendered for the Cluster. */
  scheduled: boolean;
}

const compression = (value: string | undefined, what: string): Compression | undefined => {
  if (value === undefined || value === '') return undefined;
  if (!(COMPRESSIONS as readonly string[]).includes(value))
    throw new Error(
      `ObjectStore ${what}: ${value} is not one barman-cli-cloud 3.4 (Debian 12) runs here (${COMPRESSIONS.join(', ')})`,
    );
  return value as Compression;
};

/** The plugin's settings for one serverName of a rendered ObjectStore; what the emulation cannot run is refused. */
function barmanSettings(store: ObjectStoreObject, serverName: string): BarmanSettings {
  const { configuration: c } = store.spec;
  const name = `ObjectStore ${store.metadata.name}`;
  if (!c.destinationPath.startsWith('s3://'))
    throw new Error(`${name}: only s3:// destinations are emulated (s3rver), not ${c.destinationPath}`);
  if (c.azureCredentials || c.googleCredentials || !c.s3Credentials)
    throw new Error(`${name}: only s3Credentials are emulated`);
  if (c.s3Credentials.inheritFromIAMRole || c.s3Credentials.sessionToken || c.endpointCA)
    throw new Error(`${name}: workload identity, session tokens and endpointCA are not emulated`);
  if (!c.endpointURL) throw new Error(`${name}: endpointURL must name the local store`);
  const wal = compression(c.wal?.compression, 'wal.compression');
  const data = compression(c.data?.compression, 'data.compression');
  return {
    destinationPath: c.destinationPath,
    endpointUrl: c.endpointURL,
    serverName,
    ...(wal ? { walCompression: wal } : {}),
    ...(data ? { dataCompression: data } : {}),
    ...(c.data?.jobs === undefined ? {} : { jobs: c.data.jobs }),
    ...(c.data?.immediateCheckpoint ? { immediateCheckpoint: true } : {}),
  };
}

function objectStoreNamed(objects: KubeObject[], name: string | undefined, by: string): ObjectStoreObject {
  const store = objects.find((o) => o.kind === 'ObjectStore' && o.metadata.name === name);
  if (!store) throw new Error(`${by} names ObjectStore ${String(name)}, which is not rendered`);
  return store as ObjectStoreObject;
}

/** The Cluster's archiving through the plugin, when its spec.plugins has the WAL archiver entry. */
export function archivingOf(cluster: BackedUpCluster, objects: KubeObject[]): Archiving | undefined {
  const entry = cluster.spec.plugins?.find((p) => p.name === BARMAN_PLUGIN && p.enabled !== false);
  if (!entry) return undefined;
  const by = `Cluster ${cluster.metadata.name}'s ${BARMAN_PLUGIN} entry`;
  if (entry.isWALArchiver !== true)
    throw new Error(`${by}: only the WAL archiver (isWALArchiver: true) is emulated`);
  const objectStore = objectStoreNamed(objects, entry.parameters?.barmanObjectName, by);
  const schedules = (objects.filter((o) => o.kind === 'ScheduledBackup') as ScheduledBackupObject[]).filter(
    (s) => s.spec.cluster.name === cluster.metadata.name,
  );
  for (const schedule of schedules)
    if (schedule.spec.method !== 'plugin' || schedule.spec.pluginConfiguration?.name !== BARMAN_PLUGIN)
      throw new Error(
        `ScheduledBackup ${schedule.metadata.name}: only method plugin (${BARMAN_PLUGIN}) is emulated`,
      );
  return {
    objectStore,
    settings: barmanSettings(objectStore, entry.parameters?.serverName ?? cluster.metadata.name),
    archiveTimeout: cluster.spec.postgresql?.parameters?.archive_timeout ?? CNPG_DEFAULT_ARCHIVE_TIMEOUT,
    scheduled: schedules.length > 0,
  };
}

/** What the recovery hook reports. */
export interface RecoveryReport extends RecoveryRun {
  cluster: string;
  sourceServerName: string;
  serverName: string;
  backupId: string;
  targetTime: string | null;
  /** The WAL segment the recovered server archived to its own folder, and that folder's bytes after. */
  archivedWal: string;
  archivedBytes: number;
}

/** The plugin's part of the emulated Cluster: the store, the archiving settings, backups and recovery. */
export class PluginBackups {
  readonly store: ObjectStore;
  private readonly port: number;
  private readonly recovered: OwnPostgres[] = [];

  constructor(readonly archiving: Archiving) {
    const { destinationPath, endpointUrl } = archiving.settings;
    const endpoint = new URL(endpointUrl);
    if (
      endpoint.protocol !== 'http:' ||
      !['127.0.0.1', 'localhost'].includes(endpoint.hostname) ||
      !endpoint.port
    )
      throw new Error(`endpointURL ${endpointUrl}: the emulated store listens on http://127.0.0.1:<port>`);
    this.port = Number(endpoint.port);
    this.store = new ObjectStore(splitDestination(destinationPath).bucket);
  }

  async start(): Promise<void> {
    await this.store.start(30_000, this.port);
  }

  /** The Secrets the ObjectStore's s3Credentials name, holding the store's credentials. */
  secrets(): KubeObject[] {
    const credentials = this.archiving.objectStore.spec.configuration.s3Credentials ?? {};
    const values: [SecretKeyRef | undefined, string | undefined][] = [
      [credentials.accessKeyId, this.store.env.AWS_ACCESS_KEY_ID],
      [credentials.secretAccessKey, this.store.env.AWS_SECRET_ACCESS_KEY],
      [credentials.region, this.store.env.AWS_DEFAULT_REGION],
    ];
    const byName = new Map<string, Record<string, string>>();
    for (const [ref, value] of values) {
      if (!ref || value === undefined) continue;
      byName.set(ref.name, { ...byName.get(ref.name), [ref.key]: value });
    }
    return [...byName].map(([name, data]) => secretObject(name, 'Opaque', data));
  }

  /** The tools' environment, read from those Secrets by the ObjectStore's key references, as the plugin does. */
  get env(): Record<string, string> {
    const secrets = this.secrets() as (KubeObject & { data: Record<string, string> })[];
    const read = (ref: SecretKeyRef | undefined): string | undefined => {
      const encoded = ref && secrets.find((s) => s.metadata.name === ref.name)?.data[ref.key];
      return encoded === undefined ? undefined : Buffer.from(encoded, 'base64').toString('utf8');
    };
    const credentials = this.archiving.objectStore.spec.configuration.s3Credentials ?? {};
    const accessKey = read(credentials.accessKeyId);
    const secretKey = read(credentials.secretAccessKey);
    if (!accessKey || !secretKey)
      throw new Error(
        `ObjectStore ${this.archiving.objectStore.metadata.name}: accessKeyId and secretAccessKey are required`,
      );
    const region = read(credentials.region);
    return {
      AWS_ACCESS_KEY_ID: accessKey,
      AWS_SECRET_ACCESS_KEY: secretKey,
      ...(region ? { AWS_DEFAULT_REGION: region } : {}),
    };
  }

  /** The primary's settings: archive_mode on, archive_command the plugin's barman-cloud-wal-archive. */
  primarySettings(): Record<string, string> {
    return archivingSettings(this.archiving.settings, this.archiving.archiveTimeout);
  }

  /** A base backup as the ScheduledBackup's Backup makes one through the plugin. */
  async baseBackup(instance: Instance): Promise<{ backup: BackupInfo; ms: number }> {
    if (!this.archiving.scheduled) throw new Error('no ScheduledBackup is rendered for the Cluster');
    return takeBaseBackup(this.archiving.settings, this.env, instance);
  }

  /**
   * A new Cluster bootstrapped as its rendered bootstrap.recovery says: from its externalClusters
   * source read through the plugin (barmanObjectName, serverName), the last base backup that ended
   * before the target time, then WAL up to it; the server then archives to its own serverName.
   * `current` is the running primary, whose open WAL segment is archived first (what
   * archive_timeout would do within its period).
   */
  async recover(
    rendered: KubeObject[],
    current: Instance,
    runningCluster: string,
  ): Promise<{ server: OwnPostgres; report: RecoveryReport }> {
    const cluster = rendered.find(
      (o) => o.kind === 'Cluster' && (o as BackedUpCluster).spec.bootstrap?.recovery,
    ) as BackedUpCluster | undefined;
    const recovery = cluster?.spec.bootstrap?.recovery;
    if (!cluster || !recovery) throw new Error('no rendered Cluster bootstraps by recovery');
    if (cluster.metadata.name === runningCluster)
      throw new Error(
        `Cluster ${cluster.metadata.name} is the running one: CloudNativePG recovers only into a new Cluster`,
      );
    const external = cluster.spec.externalClusters?.find((e) => e.name === recovery.source);
    if (external?.plugin?.name !== BARMAN_PLUGIN)
      throw new Error(
        `bootstrap.recovery.source ${recovery.source}: no externalClusters entry read through ${BARMAN_PLUGIN}`,
      );
    const by = `externalClusters ${external.name}`;
    const sourceStore = objectStoreNamed(rendered, external.plugin.parameters?.barmanObjectName, by);
    const sourceServerName = external.plugin.parameters?.serverName ?? external.name;
    const source = barmanSettings(sourceStore, sourceServerName);
    const { destinationPath, endpointUrl } = this.archiving.settings;
    if (source.destinationPath !== destinationPath || source.endpointUrl !== endpointUrl)
      throw new Error(
        `${by} reads ${source.destinationPath} at ${source.endpointUrl}, not the emulated store`,
      );
    const own = archivingOf(cluster, rendered);
    if (!own) throw new Error(`Cluster ${cluster.metadata.name} has no WAL archiver entry`);
    const targetText = recovery.recoveryTarget?.targetTime;
    const target = targetText === undefined ? undefined : new Date(targetText);
    if (target && Number.isNaN(target.getTime()))
      throw new Error(`recoveryTarget.targetTime ${String(targetText)} is not a time`);

    await archiveNow(current.port);
    const backups = (await listBackups(source, this.env)).filter(
      (b) => b.status === 'DONE' && (!target || new Date(b.end_time) < target),
    );
    const backup = backups.at(-1);
    if (!backup) throw new Error(`no base backup of ${sourceServerName} ended before ${targetText ?? 'now'}`);
    const server = new OwnPostgres({ env: this.env });
    this.recovered.push(server);
    await server.reserve();
    const run = await recoverServer(server, {
      source,
      backupId: backup.backup_id,
      env: this.env,
      ...(target ? { target } : {}),
      archiveTo: { settings: own.settings, archiveTimeout: own.archiveTimeout },
      withinMs: 120_000,
    });
    const archivedWal = await archiveNow(server.port);
    return {
      server,
      report: {
        ...run,
        cluster: cluster.metadata.name,
        sourceServerName,
        serverName: own.settings.serverName,
        backupId: backup.backup_id,
        targetTime: targetText ?? null,
        archivedWal,
        archivedBytes: storedBytes(this.store, own.settings, 'wals'),
      },
    };
  }

  async destroy(): Promise<void> {
    for (const server of this.recovered) server.destroy();
    await this.store.destroy();
  }
}
