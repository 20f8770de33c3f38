/**
 * The registry's HTTP API with the login a release's pushing tool reads, for what the tools cannot
 * do themselves: Debian's skopeo drops `artifactType` from an index's descriptors, so it cannot push
 * the referrers tag schema's index, and no tool here asks a registry whether it takes pushes.
 * The login is found where the tool looks (`containers`: podman and skopeo, which read
 * REGISTRY_AUTH_FILE, the runtime's and the user's auth.json, then docker's config.json; `helm`: its
 * registry config, then docker's); a credential helper's logins are not read. The registry's
 * challenge is answered as it asks, with the login (Basic) or a token from its realm (Bearer).
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

export type LoginOf = 'containers' | 'helm';

/** How long one answer of the registry may take: a release check that hangs helps no one. */
const ANSWER_MS = 30_000;

/**
 * A request to the registry on a connection of its own: the release blocks for minutes between its
 * requests (build, push, SBOMs), so a connection kept alive would be reused after a front end closed it.
 */
export function registryFetch(
  url: string | URL,
  init: Omit<RequestInit, 'headers'> & { headers?: Record<string, string> } = {},
): Promise<Response> {
  return fetch(url, {
    ...init,
    headers: { ...init.headers, connection: 'close' },
    signal: AbortSignal.timeout(ANSWER_MS),
  });
}

interface Login {
  /** `user:password`, base64, as the auth files keep it. */
  auth: string;
  file: string;
}

/** The files `tool` reads logins from, in its order. */
function authFiles(tool: LoginOf): string[] {
  const home = homedir();
  const config = process.env.XDG_CONFIG_HOME ?? path.join(home, '.config');
  const docker = path.join(process.env.DOCKER_CONFIG ?? path.join(home, '.docker'), 'config.json');
  if (tool === 'helm') {
    const helmHome = process.env.HELM_CONFIG_HOME ?? path.join(config, 'helm');
    return [process.env.HELM_REGISTRY_CONFIG ?? path.join(helmHome, 'registry', 'config.json'), docker];
  }
  // A file the user names is the only one podman and skopeo read.
  if (process.env.REGISTRY_AUTH_FILE) return [process.env.REGISTRY_AUTH_FILE];
  const runtime = process.env.XDG_RUNTIME_DIR
    ? path.join(process.env.XDG_RUNTIME_DIR, 'containers')
    : path.join('/run/containers', String(process.getuid?.() ?? 0));
  return [path.join(runtime, 'auth.json'), path.join(config, 'containers', 'auth.json'), docker];
}

/** A key of `auths` as the repository it covers: a host, or a host and path; a URL key names its host. */
function covers(key: string): string {
  const url = /^https?:\/\/([^/]+)/.exec(key);
  return url?.[1] ?? key.replace(/\/+$/, '');
}

/** The login for `repository` (host/path/name): the most specific key of the first file holding one. */
function loginFor(repository: string, tool: LoginOf): Login | undefined {
  const parts = repository.split('/');
  // helm keys its logins by host alone; podman and skopeo also by a repository's path.
  const scopes =
    tool === 'helm'
      ? parts.slice(0, 1)
      : parts.map((_, index) => parts.slice(0, parts.length - index).join('/'));
  for (const file of authFiles(tool)) {
    if (!existsSync(file)) continue;
    const { auths = {} } = JSON.parse(readFileSync(file, 'utf8')) as {
      auths?: Record<string, { auth?: string }>;
    };
    const byScope = new Map(Object.entries(auths).map(([key, entry]) => [covers(key), entry.auth]));
    for (const scope of scopes) {
      const auth = byScope.get(scope);
      if (auth) return { auth, file };
    }
  }
  return undefined;
}

/** The challenge's scheme and parameters (`Bearer realm="…",service="…"`). */
function parseChallenge(header: string): { scheme: string; params: Record<string, string> } {
  const scheme = header.split(/\s+/, 1)[0]?.toLowerCase() ?? '';
  const params: Record<string, string> = {};
  for (const [, name, value] of header.matchAll(/(\w+)="([^"]*)"/g)) if (name) params[name] = value ?? '';
  return { scheme, params };
}

export interface RegistrySession {
  base: string;
  /** The header to send, if the registry asks for one. */
  headers: Record<string, string>;
  /** Where the login came from, or undefined when none was found. */
  loginFile: string | undefined;
}

/**
 * Headers with which the registry at `host` takes pulls and pushes to `repository` (its path in
 * the registry), as far as the login allows: the registry's API root says what it asks for.
 */
export async function registrySession(
  host: string,
  repository: string,
  plainHttp: boolean,
  tool: LoginOf,
): Promise<RegistrySession> {
  const base = `${plainHttp ? 'http' : 'https'}://${host}`;
  const login = loginFor(`${host}/${repository}`, tool);
  const session = { base, headers: {}, loginFile: login?.file };
  const ping = await registryFetch(`${base}/v2/`);
  await ping.body?.cancel();
  if (ping.status !== 401) return session;
  const { scheme, params } = parseChallenge(ping.headers.get('www-authenticate') ?? '');
  const basic = login ? { authorization: `Basic ${login.auth}` } : undefined;
  if (scheme === 'basic') return { ...session, headers: basic ?? {} };
  if (scheme !== 'bearer' || !params.realm) return session;
  const realm = new URL(params.realm);
  // The login goes to the realm: never in clear unless the registry itself is spoken to in clear.
  if (realm.protocol !== 'https:' && !plainHttp)
    throw new Error(
      `${host} names a token realm not on HTTPS (${params.realm}): its login is not sent there`,
    );
  if (params.service) realm.searchParams.set('service', params.service);
  realm.searchParams.set('scope', `repository:${repository}:pull,push`);
  const answer = await registryFetch(realm, { headers: basic ?? {} });
  if (answer.status !== 200) {
    await answer.body?.cancel();
    return session;
  }
  const { token, access_token: accessToken } = (await answer.json()) as {
    token?: string;
    access_token?: string;
  };
  const bearer = token ?? accessToken;
  return { ...session, headers: bearer ? { authorization: `Bearer ${bearer}` } : {} };
}

/**
 * Why the registry would not take a push to `repository` with the login at hand, or undefined if
 * it would: an upload is started, the first step of every push, and cancelled.
 */
export async function pushRefusal(
  host: string,
  repository: string,
  plainHttp: boolean,
  tool: LoginOf,
): Promise<string | undefined> {
  const session = await registrySession(host, repository, plainHttp, tool);
  const start = await registryFetch(`${session.base}/v2/${repository}/blobs/uploads/`, {
    method: 'POST',
    headers: session.headers,
  });
  await start.body?.cancel();
  if (start.status === 202) {
    const upload = start.headers.get('location');
    if (upload) {
      const cancel = await registryFetch(new URL(upload, session.base), {
        method: 'DELETE',
        headers: session.headers,
      });
      await cancel.body?.cancel();
    }
    return undefined;
  }
  const login = session.loginFile
    ? `the login for it in ${session.loginFile}`
    : `no login (none for it in ${authFiles(tool).join(', ')})`;
  const how = tool === 'helm' ? '`helm registry login`' : '`podman login` or `skopeo login`';
  return `${host}/${repository} does not take pushes with ${login}: it answers ${String(start.status)} to the start of an upload; log in with ${how} as a user who may push there`;
}
