/**
 * What CloudNativePG 1.30.0 would run for the rendered Cluster and Pooler, on this one machine:
 * - the cluster CA (Secret <cluster>-ca: ca.crt and ca.key) and a server certificate it signs for
 *   the names CloudNativePG gives its own (<cluster>-rw, -r, -ro, each also .<ns> and .<ns>.svc)
 *   plus the Cluster's spec.certificates.serverAltDNSNames;
 * - the instances: a primary and a synchronous standby (tools/harness/replicated-postgres.ts), with the
 *   database and owner of bootstrap.initdb and its postInitApplicationSQL run as the superuser;
 * - the -rw Service: a TCP relay (tools/harness/relay.ts) whose target moves to the promoted standby;
 * - Secret <cluster>-app: basic-auth with username, password, host (the -rw Service), port, dbname;
 * - the -ro Service (reads on standbys, cnpg.reads): a TCP relay to the standby while it is one;
 * - the Poolers: PgBouncer 1.24.1 with the pgbouncer.ini CloudNativePG writes for each (type rw
 *   before the -rw Service, type ro before the -ro Service)
 *   (cloudnative-pg/cloudnative-pg, pkg/management/pgbouncer/config/config.go and strings.go, commit
 *   4b5e244a7d031f67e025c83c1555e7726ecbbfa1, tag v1.30.0): the rendered poolMode and parameters over
 *   its defaults (auth_type hba, client_tls_sslmode prefer, log_stats 0, ignore_startup_parameters
 *   extra_float_digits,options with the rendered ones appended), PgBouncer's own defaults for the
 *   rest, client TLS with the server certificate, and `host all all 0.0.0.0/0 md5` in its hba file.
 * - backups (local/cnpg-backup.ts): when the Cluster's spec.plugins has the Barman Cloud plugin's WAL
 *   archiver, the primary archives into the rendered ObjectStore's store from its first start, and
 *   the runner's control hooks take a base backup, make an operator's mistake and recover a new
 *   Cluster from the store, onto which the -rw Service then moves.
 * What one machine changes, and why it does not change what the service meets: one PgBouncer for
 * spec.instances (each instance is configured alike); the owner's SCRAM secret read from pg_authid
 * into the auth_file once, where CloudNativePG's auth_query reads the same row per login; no TLS
 * between PgBouncer and PostgreSQL; two instances, so after a failover the new primary waits for no
 * standby, where a third instance would become its synchronous standby.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { BackupControl, DatabaseControl, StandbyControl } from '../suite/drivers';
import { makeCa, signServer } from '../../tools/harness/certificates';
import { OwnPgBouncer } from '../../tools/harness/pgbouncer';
import { ownForPostgres, queryServer } from '../../tools/harness/postgres';
import { ReplicatedPostgres } from '../../tools/harness/replicated-postgres';
import { Relay } from '../../tools/harness/relay';
import { freePort } from '../../tools/harness/service';
import { setTimeout as sleep } from 'node:timers/promises';
import { massDelete, type Instance } from '../../tools/harness/barman';
import {
  archivingOf,
  PluginBackups,
  type Archiving,
  type BackedUpCluster,
  type RecoveryReport,
} from './cnpg-backup';
import { secretObject, type KubeObject } from '../../tools/harness/manifests';

/** The parts of a Cluster the stand-in reads, beside those the plugin's part reads. */
export interface CnpgCluster extends BackedUpCluster {
  spec: BackedUpCluster['spec'] & {
    bootstrap: { initdb: { database: string; owner: string; postInitApplicationSQL?: string[] } };
    certificates?: { serverAltDNSNames?: string[] };
  };
}

export interface CnpgPooler extends KubeObject {
  spec: {
    cluster: { name: string };
    type: string;
    pgbouncer: { poolMode: string; parameters?: Record<string, string> };
  };
}

/**
 * The rendered Poolers (the rw one, and the ro one when reads go to standbys) and the Cluster they
 * serve, if the release renders CloudNativePG's database, and the Cluster's archiving through the
 * Barman Cloud plugin when it has one.
 */
export function cnpgObjects(
  objects: KubeObject[],
): { cluster: CnpgCluster; pooler: CnpgPooler; readPooler?: CnpgPooler; archiving?: Archiving } | undefined {
  const all = objects.filter((o) => o.kind === 'Pooler') as CnpgPooler[];
  if (all.length === 0) return undefined;
  const [pooler, ...otherRw] = all.filter((p) => p.spec.type === 'rw');
  const readPooler = all.find((p) => p.spec.type === 'ro');
  if (!pooler || otherRw.length > 0 || all.length !== (readPooler ? 2 : 1))
    throw new Error('one Pooler of type rw, and at most one of type ro, is modelled');
  if (readPooler && readPooler.spec.cluster.name !== pooler.spec.cluster.name)
    throw new Error(
      `Poolers ${pooler.metadata.name} and ${readPooler.metadata.name} name different Clusters`,
    );
  const cluster = objects.find(
    (o) => o.kind === 'Cluster' && o.metadata.name === pooler.spec.cluster.name,
  ) as CnpgCluster | undefined;
  if (!cluster)
    throw new Error(
      `Pooler ${pooler.metadata.name} names Cluster ${pooler.spec.cluster.name}, which is not rendered`,
    );
  const archiving = archivingOf(cluster, objects);
  return { cluster, pooler, ...(readPooler ? { readPooler } : {}), ...(archiving ? { archiving } : {}) };
}

/** PgBouncer's settings as CloudNativePG builds them from the Pooler (buildPgBouncerParameters). */
function poolerSettings(pooler: CnpgPooler): Record<string, string> {
  const given = pooler.spec.pgbouncer.parameters ?? {};
  const defaults: Record<string, string> = {
    log_stats: '0',
    auth_type: 'hba',
    client_tls_sslmode: 'prefer',
    ignore_startup_parameters: 'extra_float_digits,options',
  };
  const settings: Record<string, string> = {
    ...defaults,
    ...given,
    pool_mode: pooler.spec.pgbouncer.poolMode,
  };
  if (given.ignore_startup_parameters)
    settings.ignore_startup_parameters = `${defaults.ignore_startup_parameters ?? ''},${given.ignore_startup_parameters}`;
  // The harness's own quick-retry settings give way to PgBouncer's defaults, which CloudNativePG keeps.
  for (const [key, value] of Object.entries({
    server_connect_timeout: '15',
    server_login_retry: '15',
    query_wait_timeout: '120',
  }))
    settings[key] ??= value;
  return settings;
}

/** What the suite's control reaches (local/control.ts): the database, its standby and its backups. */
export class CnpgStandIn implements DatabaseControl {
  readonly instances: ReplicatedPostgres;
  /** The plugin's part, when the Cluster archives through it. */
  private readonly barman: PluginBackups | undefined;
  /** The backup case's control, when the Cluster archives through the plugin. */
  readonly backups: BackupControl | undefined;
  /** The standby-reads case's control, when the release reads on standbys (the ro Pooler). */
  readonly standby: StandbyControl | undefined;
  /** After a failover the standby is the primary. */
  private promoted = false;
  /** After a recovery the service is on the recovered Cluster, and this one is gone. */
  private recovered = false;
  private rw: Relay | undefined;
  private pgbouncer: OwnPgBouncer | undefined;
  /** The -ro Service and the ro Pooler's PgBouncer, when the release reads on standbys. */
  private ro: Relay | undefined;
  private readPgbouncer: OwnPgBouncer | undefined;
  private readonly password = randomBytes(24).toString('base64url');
  private readonly dir: string;

  constructor(
    private readonly cluster: CnpgCluster,
    private readonly pooler: CnpgPooler,
    private readonly namespace: string,
    workDir: string,
    /** Names the replicas dial besides the rendered ones (processes cannot map a Service name). */
    private readonly extraNames: string[] = [],
    archiving?: Archiving,
    private readonly readPooler?: CnpgPooler,
    /** How long after the primary's loss the standby is promoted (the operator's detection and election). */
    private readonly failoverDetectionMs = 0,
  ) {
    this.dir = join(workDir, 'cnpg');
    mkdirSync(this.dir, { recursive: true });
    this.barman = archiving ? new PluginBackups(archiving) : undefined;
    // The control server calls these remotely: objects of the interfaces' methods only, not the stand-in.
    this.backups = archiving
      ? {
          base: () => this.base(),
          mistake: () => this.mistake(),
          recover: (objects) => this.recover(objects),
        }
      : undefined;
    this.standby = readPooler
      ? { pauseReplay: (paused) => this.pauseReplay(paused), committed: () => this.committed() }
      : undefined;
    // The store's credentials reach archive_command through the servers' environment only.
    this.instances = new ReplicatedPostgres(
      this.barman ? { settings: this.barman.primarySettings(), env: this.barman.env } : {},
    );
  }

  private get name(): string {
    return this.cluster.metadata.name;
  }

  /** The names on the server certificate: CloudNativePG's own and the Cluster's serverAltDNSNames. */
  serverNames(): string[] {
    const own = ['rw', 'r', 'ro'].flatMap((type) => {
      const service = `${this.name}-${type}`;
      return [service, `${service}.${this.namespace}`, `${service}.${this.namespace}.svc`];
    });
    return [...own, ...(this.cluster.spec.certificates?.serverAltDNSNames ?? []), ...this.extraNames];
  }

  /** The operator's CA (the <cluster>-ca Secret) and the server certificate it signs. */
  private certificates(): void {
    const ca = makeCa(this.dir, 'ca', this.name);
    signServer(this.dir, 'server', ca, this.serverNames());
    ownForPostgres(ca.cert);
  }

  /** The ro Pooler's port once started (reads on standbys), else undefined. */
  get readPoolerPort(): number | undefined {
    return this.readPgbouncer?.port;
  }

  /** Instances, the -rw Service, bootstrap, the Pooler; resolves with the Pooler's port. */
  async start(): Promise<number> {
    this.certificates();
    await this.barman?.start();
    await this.instances.init();
    this.rw = new Relay(this.instances.primaryPort);
    await this.rw.start();
    const { database, owner, postInitApplicationSQL = [] } = this.cluster.spec.bootstrap.initdb;
    const primary = this.instances.primaryPort;
    await queryServer(primary, 'postgres', `CREATE ROLE "${owner}" LOGIN PASSWORD '${this.password}'`);
    await queryServer(primary, 'postgres', `CREATE DATABASE "${database}" OWNER "${owner}"`);
    // What CloudNativePG's auth_query returns for the owner: its SCRAM secret.
    const [row] = await queryServer<{ rolpassword: string }>(
      primary,
      'postgres',
      'SELECT rolpassword FROM pg_authid WHERE rolname = $1',
      [owner],
    );
    for (const sql of postInitApplicationSQL) await queryServer(primary, database, sql);
    const secret = row?.rolpassword;
    if (!secret) throw new Error(`no password for ${owner}`);

    const tls = {
      client_tls_cert_file: join(this.dir, 'server.crt'),
      client_tls_key_file: join(this.dir, 'server.key'),
      client_tls_ca_file: join(this.dir, 'ca.crt'),
      server_tls_sslmode: 'disable',
    };
    const bouncer = (pooler: CnpgPooler, port: number) =>
      new OwnPgBouncer({
        version: '1.24',
        target: { host: '127.0.0.1', port },
        poolSize: Number(pooler.spec.pgbouncer.parameters?.default_pool_size ?? 20),
        overrides: {
          settings: { ...poolerSettings(pooler), ...tls },
          users: { [owner]: secret },
          hba: ['host all all 0.0.0.0/0 md5'],
        },
      });
    this.pgbouncer = bouncer(this.pooler, this.rw.port);
    await this.pgbouncer.start();
    if (this.readPooler) {
      // The -ro Service: the ready standbys, here the one standby (the owner reached it by replication).
      this.ro = new Relay(this.instances.standbyPort);
      await this.ro.start();
      this.readPgbouncer = bouncer(this.readPooler, this.ro.port);
      await this.readPgbouncer.start();
    }
    return this.pgbouncer.port;
  }

  /** The standby's replay paused (pg_wal_replay_pause) or resumed: a standby falling behind. */
  async pauseReplay(paused: boolean): Promise<void> {
    if (this.promoted || this.recovered) throw new Error(`Cluster ${this.name} has no standby left`);
    const { standbyPort } = this.instances;
    await (paused ? this.instances.pauseReplay(standbyPort) : this.instances.resumeReplay(standbyPort));
  }

  /** Transactions each instance has committed in the application database (where reads landed). */
  async committed(): Promise<{ primary: number; standby: number }> {
    const { database } = this.cluster.spec.bootstrap.initdb;
    const count = async (port: number) => {
      const [row] = await this.instances.query<{ n: string }>(
        port,
        'SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = $1',
        [database],
      );
      return Number(row?.n ?? 0);
    };
    const { primaryPort, standbyPort } = this.instances;
    return { primary: await count(primaryPort), standby: await count(standbyPort) };
  }

  /** The Secrets CloudNativePG makes: <cluster>-app (basic-auth) and <cluster>-ca. */
  secrets(): KubeObject[] {
    const { database, owner } = this.cluster.spec.bootstrap.initdb;
    return [
      secretObject(`${this.name}-app`, 'kubernetes.io/basic-auth', {
        username: owner,
        password: this.password,
        host: `${this.name}-rw`,
        port: '5432',
        dbname: database,
      }),
      secretObject(`${this.name}-ca`, 'Opaque', {
        'ca.crt': readFileSync(join(this.dir, 'ca.crt')),
        'ca.key': readFileSync(join(this.dir, 'ca.key')),
      }),
      ...(this.barman?.secrets() ?? []),
    ];
  }

  /** The instance the -rw Service leads to (its socket folder and port). */
  private primary(): Instance {
    if (this.recovered) throw new Error(`Cluster ${this.name} was replaced by a recovered one`);
    const { dir, primaryPort, standbyPort } = this.instances;
    return { host: dir, port: this.promoted ? standbyPort : primaryPort };
  }

  private plugin(): PluginBackups {
    if (!this.barman) throw new Error(`Cluster ${this.name} has no Barman Cloud plugin entry`);
    return this.barman;
  }

  /** The ScheduledBackup's next base backup, taken now (cron time cannot pass in a test). */
  async base(): Promise<{ backupId: string; name: string; ms: number }> {
    const { backup, ms } = await this.plugin().baseBackup(this.primary());
    return { backupId: backup.backup_id, name: backup.backup_name ?? '', ms };
  }

  /** An operator's mass delete in psql on the primary: the moment just before it and the ids deleted. */
  async mistake(): Promise<{ before: string; deleted: number[] }> {
    const { before, deleted } = await massDelete(
      this.primary(),
      this.cluster.spec.bootstrap.initdb.database,
      'posts',
    );
    return { before: before.toISOString(), deleted };
  }

  /**
   * The rendered recovery Cluster made from the store; then the service moved onto it: the -rw
   * Service (which the Pooler dials) leads to the recovered server and this Cluster's instances
   * stop, which ends the Pooler's connections to them.
   */
  async recover(rendered: KubeObject[]): Promise<RecoveryReport> {
    const { server, report } = await this.plugin().recover(rendered, this.primary(), this.name);
    this.rw?.retarget(server.port);
    // The recovered Cluster has no standby here: its -ro Service leads nowhere.
    this.ro?.retarget(await freePort());
    this.recovered = true;
    this.instances.destroy();
    return report;
  }

  /** The database down (the suite's case 6): the primary stops, the Pooler stays. */
  stopDatabase(): void {
    this.instances.stopPrimary();
  }

  async startDatabase(): Promise<void> {
    await this.instances.startPrimary();
  }

  /**
   * The primary's pod lost: its server gone at once (immediate stop); `failoverDetectionMs` later (the
   * operator's reconcile noticing it and electing a standby, docs/src/failover.md) the standby is
   * promoted and the -rw Service's endpoint moves to it, which is all PgBouncer sees (it dials the
   * same address). Until then the Service leads nowhere: connections to it are refused.
   */
  async failover(): Promise<{ promotedAfterMs: number }> {
    const started = Date.now();
    this.instances.killPrimary();
    this.rw?.retarget(await freePort());
    await sleep(this.failoverDetectionMs);
    this.instances.promoteStandby();
    this.promoted = true;
    this.rw?.retarget(this.instances.standbyPort);
    // The promoted standby is the primary now: with two instances no standby is left for -ro.
    this.ro?.retarget(await freePort());
    return { promotedAfterMs: Date.now() - started };
  }

  async close(): Promise<void> {
    // Kept with the run's logs (the work folder stays when a run fails).
    if (this.pgbouncer) writeFileSync(join(this.dir, 'pgbouncer.log'), this.pgbouncer.log);
    if (this.readPgbouncer) writeFileSync(join(this.dir, 'pgbouncer-ro.log'), this.readPgbouncer.log);
    await this.pgbouncer?.destroy();
    await this.readPgbouncer?.destroy();
    await this.rw?.close();
    await this.ro?.close();
    this.instances.destroy();
    await this.barman?.destroy();
  }
}
