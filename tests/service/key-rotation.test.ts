import { createHash } from 'node:crypto';
import type { Express } from 'express';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createApp } from '../../service/src/app';
import { createLogger } from '../../service/src/logger';
import { describeSettings, keyId, loadSettings, SettingsError } from '../../service/src/settings';
import { sleep } from '../../tools/harness/client';
import { startService, stopAll } from '../../tools/harness/service';
import {
  bearer,
  captureLog,
  expectProblem,
  fixture,
  freshDatabaseEnv,
  logIn,
  newAccount,
  nextWholeSecond,
  openMigratedDatabase,
  signToken,
  testEnv,
  type Account,
} from './helpers';

// The key before the rotation, the key after it, and one this service never knew.
const K1 = 'rotation-key-one-0123456789abcdef0123456789';
const K2 = 'rotation-key-two-0123456789abcdef0123456789';
const FOREIGN = 'a-key-of-some-other-service-0123456789abcdef';

const headerOf = (token: string) => jwt.decode(token, { complete: true })?.header;

describe('Rotating SECRET_KEY in three phases, pods of every phase on one database', () => {
  // A pod of each phase, as the Secret sets it (docs/settings.md, "Rotating SECRET_KEY").
  let phase0: Express; // K1 only: before the rotation
  let phase1: Express; // K1 signs, K2 accepted: every pod learns K2 before anyone signs with it
  let phase2: Express; // K2 signs, K1 accepted: K1's tokens live out their lifetime
  let phase3: Express; // K2 only: after ACCESS_TOKEN_EXPIRE_MINUTES (+30 s) since phase 2 ended
  let account: Account;

  fixture(openMigratedDatabase, async ({ db, env, logger }) => {
    // Every pod on the same database (one Database: the embedded one lives in this process).
    const pod = (secretKey: string, accepted: string[] = []) =>
      createApp({
        db,
        logger,
        settings: loadSettings(
          testEnv({ ...env, SECRET_KEY: secretKey, SECRET_KEYS_ACCEPTED: accepted.join(',') }),
        ),
      });
    phase0 = pod(K1);
    phase1 = pod(K1, [K2]);
    phase2 = pod(K2, [K1]);
    phase3 = pod(K2);
    account = await newAccount(phase0);
  });

  const loginOn = (pod: Express): Promise<string> => logIn(pod, account.email, account.password);
  const postsOn = (pod: Express, token: string) => request(pod).get('/posts/').set(bearer(token));
  const expectRefused = async (pod: Express, token: string) => {
    const res = await postsOn(pod, token);
    expect(expectProblem(res, 401).detail).toBe('Could not validate credentials');
  };
  const signed = (key: string, options: jwt.SignOptions = {}) =>
    signToken({}, { key, subject: String(account.user.id), ...options });

  test('When a pod logs in, then the token header names the signing key by its id and the key verifies it', async () => {
    for (const [pod, key] of [
      [phase0, K1],
      [phase1, K1],
      [phase2, K2],
      [phase3, K2],
    ] as const) {
      const token = await loginOn(pod);
      expect(headerOf(token)).toEqual({ alg: 'HS256', typ: 'JWT', kid: keyId(key) });
      expect(() => jwt.verify(token, key, { algorithms: ['HS256'] })).not.toThrow();
    }
    expect(keyId(K1)).not.toBe(keyId(K2));
  });

  test('When a token is issued before the rotation (phase 0), then phase-1 and phase-2 pods accept it', async () => {
    const token = await loginOn(phase0);
    for (const pod of [phase0, phase1, phase2]) await postsOn(pod, token).expect(200);
  });

  test('When the rollout from phase 1 to phase 2 is half done, then each pod accepts the tokens the other issues', async () => {
    const fromPhase1 = await loginOn(phase1);
    const fromPhase2 = await loginOn(phase2);
    await postsOn(phase2, fromPhase1).expect(200);
    await postsOn(phase1, fromPhase2).expect(200);
  });

  test('When the rollout from phase 2 to phase 3 is half done, then both accept the new tokens', async () => {
    const fromPhase2 = await loginOn(phase2);
    const fromPhase3 = await loginOn(phase3);
    for (const pod of [phase2, phase3]) {
      await postsOn(pod, fromPhase2).expect(200);
      await postsOn(pod, fromPhase3).expect(200);
    }
  });

  test('When the old key is retired (phase 3), then a K1 token is refused 401 and K2 tokens work', async () => {
    await expectRefused(phase3, await loginOn(phase0));
    await expectRefused(phase3, await loginOn(phase1));
    await expectRefused(phase3, signed(K1, { keyid: keyId(K1) }));
    await postsOn(phase3, await loginOn(phase2)).expect(200);
    await postsOn(phase3, signed(K2, { keyid: keyId(K2) })).expect(200);
  });

  test('When a K1 token expires during phase 2, then a phase-2 pod accepts it until then and refuses it after', async () => {
    await nextWholeSecond();
    const token = signed(K1, { keyid: keyId(K1), expiresIn: 2 });
    await postsOn(phase2, token).expect(200);
    const { exp } = jwt.decode(token) as { exp: number };
    await sleep(exp * 1000 - Date.now() + 50);
    await expectRefused(phase2, token);
  });

  test('When a token without kid (the previous release) was signed with K1, then phase-2 pods accept it', async () => {
    const legacy = signed(K1);
    expect(headerOf(legacy)).not.toHaveProperty('kid');
    for (const pod of [phase0, phase1, phase2]) await postsOn(pod, legacy).expect(200);
    await expectRefused(phase3, legacy);
  });

  test('When a token without kid was signed with a key of no phase, then every pod refuses it', async () => {
    for (const pod of [phase0, phase1, phase2, phase3]) await expectRefused(pod, signed(FOREIGN));
  });

  test.each([
    ['an unknown key id', () => signed(K1, { keyid: 'AAAAAAAAAAA' })],
    ['the id of a foreign key, signed with it', () => signed(FOREIGN, { keyid: keyId(FOREIGN) })],
    ['an empty key id', () => signed(K1, { keyid: '' })],
    ["K2's id but signed with K1", () => signed(K1, { keyid: keyId(K2) })],
    ["K1's id but signed with K2", () => signed(K2, { keyid: keyId(K1) })],
  ])('When a token carries %s, then phase-1 and phase-2 pods answer 401', async (_name, token) => {
    for (const pod of [phase1, phase2]) await expectRefused(pod, token());
  });

  test('When the kid header is not a string, then 401', async () => {
    const [, payload, signature] = signed(K1).split('.');
    const header = Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT', kid: 1 })).toString('base64url');
    await expectRefused(phase1, `${header}.${payload ?? ''}.${signature ?? ''}`);
  });
});

describe('SECRET_KEYS_ACCEPTED setting', () => {
  const K3 = 'rotation-key-three-0123456789abcdef012345';
  const load = (accepted: string | undefined) =>
    loadSettings(
      testEnv({ SECRET_KEY: K1, ...(accepted === undefined ? {} : { SECRET_KEYS_ACCEPTED: accepted }) }),
    );

  test.each([
    ['unset', undefined, []],
    ['empty', '', []],
    ['only blanks', ' \n', []],
    ['one key', K2, [K2]],
    ['two keys with blanks and a newline around them', ` ${K2} ,\t${K3}\n`, [K2, K3]],
  ])('When it is %s, then exactly the keys it lists are accepted', (_name, value, keys) => {
    expect(load(value).secretKeysAccepted).toEqual(keys);
  });

  test.each([
    ['a trailing comma', `${K2},`, 'has an empty entry 2 of 2; remove the extra comma'],
    ['a leading comma', `,${K2}`, 'has an empty entry 1 of 2; remove the extra comma'],
    ['two commas in a row', `${K2},,${K3}`, 'has an empty entry 2 of 3; remove the extra comma'],
    ['a blank entry', `${K2}, ,${K3}`, 'has an empty entry 2 of 3; remove the extra comma'],
    [
      'a key shorter than 32 characters',
      `${K2},${'s'.repeat(31)}`,
      'has entry 2 of 2 shorter than 32 characters, the least SECRET_KEY takes',
    ],
    ['SECRET_KEY itself', `${K2},${K1}`, 'entry 2 of 2 is SECRET_KEY itself; list only the other keys'],
    ['the same key twice', `${K2},${K3}, ${K2}`, 'has the same key twice (entries 1 and 3)'],
  ])(
    'When it has %s, then loading stops with one line naming the setting, never a key',
    (_n, value, message) => {
      let error: unknown;
      try {
        load(value);
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(SettingsError);
      const text = (error as SettingsError).message;
      expect(text).toBe(`Invalid setting SECRET_KEYS_ACCEPTED: ${message}`);
      expect(text).not.toMatch(/\n/);
      for (const key of [K1, K2, K3, 's'.repeat(31)]) expect(text).not.toContain(key);
    },
  );

  test("When a key's id is computed, then it is base64url of the first 8 bytes of the key's SHA-256", () => {
    const digest = createHash('sha256').update(K1).digest();
    expect(keyId(K1)).toBe(digest.subarray(0, 8).toString('base64url'));
    expect(keyId(K1)).toMatch(/^[A-Za-z0-9_-]{11}$/);
  });

  test('When settings are described for the log, then they show the key ids, signing and accepted, and no key', () => {
    const settings = load(`${K2},${K3}`);
    const described = describeSettings(settings);
    expect(described.tokenKeyIds).toEqual({ signing: keyId(K1), accepted: [keyId(K2), keyId(K3)] });
    expect(describeSettings(load(undefined)).tokenKeyIds).toEqual({ signing: keyId(K1), accepted: [] });
    for (const key of [K1, K2, K3]) expect(JSON.stringify(described)).not.toContain(key);
  });

  test('When the settings object or the environment is logged by mistake, then the accepted keys are redacted', () => {
    const log = captureLog();
    const settings = load(`${K2},${K3}`);
    createLogger('info', log.stream).info(
      { settings, env: { SECRET_KEYS_ACCEPTED: `${K2},${K3}` }, SECRET_KEYS_ACCEPTED: K2 },
      'oops',
    );
    expect(log.text()).toContain('[redacted]');
    for (const key of [K1, K2, K3]) expect(log.text()).not.toContain(key);
  });
});

describe('Start-up log during a rotation', () => {
  afterAll(() => stopAll());

  test('When a pod starts with accepted keys, then its "starting" line shows the ids of the keys and the log never a key', async () => {
    const fresh = await freshDatabaseEnv();
    const env = { ...fresh.env, SECRET_KEY: K2, SECRET_KEYS_ACCEPTED: K1 };
    const svc = await startService(
      testEnv({ ...env, LOG_LEVEL: 'info', PORT: '0', SHUTDOWN_DELAY_SECONDS: '0' }),
    );
    try {
      const starting = svc.lines.find((line) => line.msg === 'starting');
      expect(starting?.settings).toMatchObject({
        tokenKeyIds: { signing: keyId(K2), accepted: [keyId(K1)] },
      });
    } finally {
      await svc.stop();
      await fresh.drop();
    }
    const output = svc.stdout() + svc.stderr();
    expect(output).toContain(keyId(K1));
    expect(output).not.toContain(K1);
    expect(output).not.toContain(K2);
  });
});
