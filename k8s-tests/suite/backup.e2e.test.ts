/**
 * Case 12: point-in-time recovery from the chart's backups (local runner, K8S_BACKUP=plugin: the
 * rendered Cluster archives through the Barman Cloud plugin's stand-in, local/cnpg-backup.ts).
 * Posts and votes are written through the proxy, the ScheduledBackup's base backup is taken, more
 * are written, then an operator deletes every post in psql (moment T), and a few more are written.
 * The chart is rendered again with this run's values, chart/values-recovery.yaml and
 * backup.recovery.targetTime just before T; the runner recovers the new Cluster those objects
 * describe from the store and moves the service onto it. Through the proxy every write acknowledged
 * before T reads back, the ones after it are absent, and the recovered Cluster archives to a folder
 * of its own. It replaces the database the other cases use, so it runs last (sequencer.mjs). Its
 * requests come from their own client address, so the rate-limit case's counter is untouched.
 */
import { readFileSync } from 'node:fs';
import { pollUntil } from '../../tools/harness/poll';
import { ensureTools } from '../../tools/tools';
import type { BackedUpCluster } from '../local/cnpg-backup';
import { renderChart } from '../local/release';
import { writeReport } from '../report';
import { closeConnections, describeAnswer, fromAddress, postJson, run, send, signedIn } from './client';
import { driverFromEnv } from './drivers';

const driver = driverFromEnv();
const valuesFiles = process.env.K8S_VALUES_FILES;
const renderedFile = process.env.K8S_RENDERED_FILE;
const backupCase = driver.backups && valuesFiles !== undefined && renderedFile ? test : test.skip;

/** Another loopback address than the other cases': the proxy's rate limit counts per client address. */
const CLIENT_ADDRESS = '127.0.0.3';
/** How long the service may take to answer from the recovered Cluster after the move. */
const SERVING_WITHIN_MS = 60_000;

afterAll(() => {
  closeConnections();
});

const options = fromAddress(CLIENT_ADDRESS);

const user = (label: string) => signedIn(`e2e-backup-${label}-${run}@example.com`, options());

interface Written {
  id: number;
  author: string;
}

/** `count` posts, alternating authors, each voted on by the other user; every answer must be 201. */
async function write(users: [string, string], label: string, count: number): Promise<Written[]> {
  const written: Written[] = [];
  for (let i = 0; i < count; i++) {
    const [author, voter] = i % 2 === 0 ? users : ([users[1], users[0]] as const);
    const title = `backup ${label} ${String(i)} ${run}`;
    const post = await postJson(
      '/posts/',
      { title, content: 'written for the backup case' },
      options(author),
    );
    expect({ title, status: post.status }).toEqual({ title, status: 201 });
    const id = (JSON.parse(post.body) as { id: number }).id;
    const vote = await postJson('/votes/', { post_id: id, dir: 1 }, options(voter));
    expect({ id, vote: vote.status }).toEqual({ id, vote: 201 });
    written.push({ id, author });
  }
  return written;
}

const read = (post: Written) => send('GET', `/posts/${String(post.id)}`, options(post.author));

/**
 * The recovery as an operator renders it: this run's values (files, comma-separated), the recovery
 * file, the time; its Cluster recovers from the running one's backups and archives under a name of
 * its own.
 */
function renderedRecovery(values: string, running: BackedUpCluster | undefined, targetTime: string) {
  const rendered = renderChart(
    ensureTools().helm,
    [...values.split(',').filter(Boolean), 'chart/values-recovery.yaml'],
    {
      'backup.recovery.targetTime': targetTime,
    },
    // The chart the run installed: the one pulled from the registry, when it was.
    process.env.K8S_CHART,
  );
  const cluster = rendered.find(
    (o) => o.kind === 'Cluster' && (o as BackedUpCluster).spec.bootstrap?.recovery,
  ) as BackedUpCluster | undefined;
  const recovery = cluster?.spec.bootstrap?.recovery;
  const source = cluster?.spec.externalClusters?.find((e) => e.name === recovery?.source);
  const ownServerName = cluster?.spec.plugins?.find((p) => p.isWALArchiver)?.parameters?.serverName;
  expect(cluster?.metadata.name).not.toBe(running?.metadata.name);
  expect(recovery?.recoveryTarget?.targetTime).toBe(targetTime);
  expect(source?.plugin?.parameters?.serverName).toBe(running?.metadata.name);
  expect(ownServerName).toBeDefined();
  expect(ownServerName).not.toBe(source?.plugin?.parameters?.serverName);
  return { rendered, cluster, ownServerName };
}

/** Each post as read back: its status and, when it is there, its votes. */
async function readBack(posts: Written[]) {
  const back: { id: number; status: number; votes: number | undefined }[] = [];
  for (const post of posts) {
    const answer = await read(post);
    back.push({
      id: post.id,
      status: answer.status,
      votes: answer.status === 200 ? (JSON.parse(answer.body) as { votes: number }).votes : undefined,
    });
  }
  return back;
}

backupCase(
  'When every post is deleted by mistake in psql, then the Cluster that chart/values-recovery.yaml renders for just before it, recovered from the object store, serves every write acknowledged before the mistake through the proxy and none after it, and archives to a folder of its own (case 12)',
  async () => {
    const backups = driver.backups;
    if (!backups || valuesFiles === undefined || !renderedFile) throw new Error('no backups');
    const running = (JSON.parse(readFileSync(renderedFile, 'utf8')) as BackedUpCluster[]).find(
      (o) => o.kind === 'Cluster',
    );
    const users: [string, string] = [await user('a'), await user('b')];
    const beforeBackup = await write(users, 'before the base backup', 4);
    const backup = await backups.base();
    const afterBackup = await write(users, 'after the base backup', 4);
    const mistake = await backups.mistake();
    const acknowledged = [...beforeBackup, ...afterBackup];
    // The mistake took every post written so far, and the service shows it.
    expect(acknowledged.filter((p) => !mistake.deleted.includes(p.id))).toEqual([]);
    const gone = await read(acknowledged[0] ?? { id: 0, author: '' });
    expect({ afterMistake: gone.status }).toEqual({ afterMistake: 404 });
    const afterMistake = await write(users, 'after the mistake', 2);

    const { rendered, cluster, ownServerName } = renderedRecovery(valuesFiles, running, mistake.before);

    const recovered = await backups.recover(rendered);
    const moved = Date.now();
    const serving = await pollUntil(
      () => read(beforeBackup[0] ?? { id: 0, author: '' }),
      (answer) => answer.status === 200,
      { withinMs: SERVING_WITHIN_MS, everyMs: 500 },
    );
    expect({ serving: describeAnswer(serving.value) }).toEqual({
      serving: expect.stringMatching(/^200 /) as unknown,
    });
    const servingMs = Date.now() - moved;

    const back = await readBack(acknowledged);
    const absent: number[] = [];
    for (const post of afterMistake) if ((await read(post)).status === 404) absent.push(post.id);

    writeReport('backup', {
      written: {
        beforeBackup: beforeBackup.length,
        afterBackup: afterBackup.length,
        afterMistake: afterMistake.length,
      },
      backupId: backup.backupId,
      backupMs: backup.ms,
      deleted: mistake.deleted.length,
      recovered: recovered.cluster,
      sourceServerName: recovered.sourceServerName,
      serverName: recovered.serverName,
      targetTime: mistake.before,
      downloadMs: recovered.downloadMs,
      replayMs: recovered.replayMs,
      servingMs,
      present: back.filter((b) => b.status === 200).length,
      absentAfterMistake: absent.length,
      archivedWal: recovered.archivedWal,
    });

    // Every write acknowledged before the mistake: the post, and the other user's vote on it.
    expect(back).toEqual(acknowledged.map((p) => ({ id: p.id, status: 200, votes: 1 })));
    expect(absent).toEqual(afterMistake.map((p) => p.id));
    expect(recovered.cluster).toBe(cluster?.metadata.name);
    expect(recovered.backupId).toBe(backup.backupId);
    expect(recovered.serverName).toBe(ownServerName);
    expect(recovered.sourceServerName).toBe(running?.metadata.name);
    expect(recovered.archivedBytes).toBeGreaterThan(0);
  },
  180_000,
);
