/**
 * Translates rendered Ingress objects and the ingress-nginx controller values into an nginx.conf,
 * the way ingress-nginx's template does for the features this chart uses. Anything the translation
 * does not model throws: a silently ignored annotation would make the emulation prove something the
 * real controller does not do. The mapping and its gaps are listed in k8s-tests/README.md.
 *
 * Followed at controller v1.14.5 (kubernetes/ingress-nginx, commit
 * 0a6fadc01bd4706bc77ceaf91487345a8d03d9c0, the release of Helm chart 4.14.5):
 * rootfs/etc/nginx/template/nginx.tmpl, internal/ingress/controller/config/config.go (defaults),
 * internal/ingress/controller/location.go (Prefix paths), internal/ingress/annotations/proxy/main.go,
 * internal/ingress/controller/template/template.go (buildNextUpstream, buildLocation) and
 * rootfs/etc/nginx/lua/balancer.lua (no ready endpoint).
 */
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';

/** The part of the ingress-nginx Helm values the translation reads (k8s-tests/ingress-nginx-values.yaml). */
export interface ControllerValues {
  controller?: Record<string, unknown>;
  [key: string]: unknown;
}

/** What the translation needs beyond the objects: where things listen and which endpoints are ready. */
export interface NginxSettings {
  /** Folder for the pid file, logs and nginx's temporary files. */
  prefix: string;
  /** 127.0.0.1 port the emulated controller listens on (port 80 on kind). */
  listenPort: number;
  /** 127.0.0.1 port of a side server that answers the configuration generation (reload detection). */
  statusPort: number;
  generation: number;
  /** Namespace of the release (ingress-nginx names zones and upstreams with it). */
  namespace: string;
  /** Ready endpoints ("127.0.0.1:port") of a Service port; none means the controller answers 503. */
  endpoints: (service: string, port: string | number) => string[];
  /**
   * Path of the headers-more filter module (Debian: libnginx-mod-http-headers-more-filter), built
   * into the controller's nginx; its template clears the Server header with more_clear_headers.
   */
  headersMoreModule: string;
}

const PREFIX = 'nginx.ingress.kubernetes.io/';

/** Controller keys that only shape how the controller runs on a cluster, not its nginx.conf. */
const DEPLOYMENT_ONLY_KEYS = new Set([
  'kind',
  'hostPort',
  'service',
  'nodeSelector',
  'tolerations',
  'publishService',
  'extraArgs',
  'admissionWebhooks',
  'resources',
  'terminationGracePeriodSeconds',
  'watchIngressWithoutClass',
  'allowSnippetAnnotations',
  'ingressClassResource',
  'replicaCount',
  'config',
]);

interface Defaults {
  limitReqStatus: number;
  connectTimeout: number;
  readTimeout: number;
  sendTimeout: number;
  nextUpstream: string;
  nextUpstreamTries: number;
  ingressClass: string;
}

class Unmodelled extends Error {
  override name = 'UnmodelledIngressFeature';
}

function refuse(message: string): never {
  throw new Unmodelled(`not modelled by the local ingress emulation: ${message}`);
}

function positiveInteger(value: unknown, what: string): number {
  const text = typeof value === 'number' ? String(value) : value;
  if (typeof text !== 'string' || !/^[1-9]\d*$/.test(text))
    refuse(`${what} must be a positive integer, got ${String(value)}`);
  return Number(text);
}

function nonNegativeInteger(value: unknown, what: string): number {
  const text = typeof value === 'number' ? String(value) : value;
  if (typeof text !== 'string' || !/^(0|[1-9]\d*)$/.test(text))
    refuse(`${what} must be a non-negative integer, got ${String(value)}`);
  return Number(text);
}

/** The values the controller's proxy-next-upstream annotation accepts (annotations/proxy/main.go). */
const NEXT_UPSTREAM =
  /^((error|timeout|invalid_header|http_500|http_502|http_503|http_504|http_403|http_404|http_429|non_idempotent|off)\s?)+$/;

function nextUpstream(value: unknown, what: string): string {
  // The controller ignores an invalid value (and keeps its default); here it fails loudly.
  if (typeof value !== 'string' || !NEXT_UPSTREAM.test(value)) refuse(`${what}: "${String(value)}"`);
  return value;
}

/**
 * The proxy_next_upstream value the template writes (buildNextUpstream): the conditions in order,
 * non_idempotent moved to the end (or added when the controller's retry-non-idempotent is on).
 */
function nextUpstreamDirective(value: string): string {
  const parts = value.split(' ').filter((part) => part !== '');
  const conditions = parts.filter((part) => part !== 'non_idempotent');
  if (parts.includes('non_idempotent')) conditions.push('non_idempotent');
  return conditions.join(' ');
}

function readController(values: ControllerValues): Defaults {
  for (const key of Object.keys(values)) if (key !== 'controller') refuse(`top-level value "${key}"`);
  const controller = values.controller ?? {};
  for (const key of Object.keys(controller)) if (!DEPLOYMENT_ONLY_KEYS.has(key)) refuse(`controller.${key}`);
  // Each controller replica keeps its own counters; the emulation is one nginx, so only one replica matches it.
  if (controller.replicaCount !== undefined && controller.replicaCount !== 1)
    refuse('controller.replicaCount other than 1 (counters are per replica)');
  if (controller.allowSnippetAnnotations === true) refuse('controller.allowSnippetAnnotations: true');
  if (controller.watchIngressWithoutClass === true) refuse('controller.watchIngressWithoutClass: true');
  const ingressClassResource = (controller.ingressClassResource ?? {}) as Record<string, unknown>;
  const ingressClass = typeof ingressClassResource.name === 'string' ? ingressClassResource.name : 'nginx';

  // ingress-nginx's own defaults (config.go), overridden by the ConfigMap keys the emulation understands.
  const defaults: Defaults = {
    limitReqStatus: 503,
    connectTimeout: 5,
    readTimeout: 60,
    sendTimeout: 60,
    nextUpstream: 'error timeout',
    nextUpstreamTries: 3,
    ingressClass,
  };
  const config = (controller.config ?? {}) as Record<string, unknown>;
  for (const [key, value] of Object.entries(config)) {
    switch (key) {
      case 'limit-req-status-code':
        defaults.limitReqStatus = positiveInteger(value, key);
        break;
      case 'proxy-connect-timeout':
        defaults.connectTimeout = positiveInteger(value, key);
        break;
      case 'proxy-read-timeout':
        defaults.readTimeout = positiveInteger(value, key);
        break;
      case 'proxy-send-timeout':
        defaults.sendTimeout = positiveInteger(value, key);
        break;
      case 'allow-snippet-annotations':
        if (String(value) !== 'false') refuse(`controller.config.${key}: ${String(value)}`);
        break;
      default:
        refuse(`controller.config.${key}`);
    }
  }
  return defaults;
}

interface IngressSettings {
  name: string;
  zone?: { name: string; rpm: number; burst: number };
  connectTimeout: number;
  readTimeout: number;
  sendTimeout: number;
  nextUpstream: string;
  nextUpstreamTries: number;
}

function readAnnotations(ingress: IIngress, namespace: string, defaults: Defaults): IngressSettings {
  const name = ingress.metadata?.name ?? refuse('an Ingress without a name');
  const annotations = ingress.metadata?.annotations ?? {};
  const settings: IngressSettings = {
    name,
    connectTimeout: defaults.connectTimeout,
    readTimeout: defaults.readTimeout,
    sendTimeout: defaults.sendTimeout,
    nextUpstream: defaults.nextUpstream,
    nextUpstreamTries: defaults.nextUpstreamTries,
  };
  let rpm: number | undefined;
  // ingress-nginx's default limit-burst-multiplier.
  let multiplier = 5;
  for (const [key, value] of Object.entries(annotations)) {
    if (key === 'kubernetes.io/ingress.class') refuse(`${name}: the legacy ${key} annotation`);
    // Annotations of other tools (cert-manager, external-dns…) do not reach nginx.conf.
    if (!key.startsWith(PREFIX)) continue;
    const short = key.slice(PREFIX.length);
    switch (short) {
      case 'limit-rpm':
        rpm = positiveInteger(value, `${name}: ${key}`);
        break;
      case 'limit-burst-multiplier':
        multiplier = positiveInteger(value, `${name}: ${key}`);
        break;
      case 'proxy-connect-timeout':
        settings.connectTimeout = positiveInteger(value, `${name}: ${key}`);
        break;
      case 'proxy-read-timeout':
        settings.readTimeout = positiveInteger(value, `${name}: ${key}`);
        break;
      case 'proxy-send-timeout':
        settings.sendTimeout = positiveInteger(value, `${name}: ${key}`);
        break;
      case 'proxy-next-upstream':
        settings.nextUpstream = nextUpstream(value, `${name}: ${key}`);
        break;
      case 'proxy-next-upstream-tries':
        // nginx: 0 means no limit.
        settings.nextUpstreamTries = nonNegativeInteger(value, `${name}: ${key}`);
        break;
      default:
        // use-regex, rewrite-target, *-snippet, limit-rps, whitelist… change matching or limits.
        refuse(`${name}: annotation ${key}`);
    }
  }
  if (rpm !== undefined) {
    // ingress-nginx: one zone per Ingress named <namespace>_<name>_rpm, 5 MB, burst = limit x multiplier.
    settings.zone = { name: `${namespace}_${name}_rpm`, rpm, burst: rpm * multiplier };
  }
  return settings;
}

interface Location {
  /** The nginx location modifier and path, e.g. "= /login" or "/". */
  match: string;
  ingress: IngressSettings;
  upstream: string;
}

function locationsFor(path: string, pathType: string, ingressName: string): string[] {
  if (!path.startsWith('/')) refuse(`${ingressName}: path "${path}" does not start with /`);
  // Characters nginx would read as syntax, or that ingress-nginx treats as a regex.
  if (/[\s;{}"'\\^$*+?()[\]|~]/.test(path)) refuse(`${ingressName}: path "${path}" has special characters`);
  switch (pathType) {
    case 'Exact':
      return [`= ${path}`];
    case 'Prefix': {
      if (path === '/') return ['/'];
      // ingress-nginx (location.go): the prefix location ends in "/" (/p -> /p/), plus an exact
      // location for the path as written: /p gets "= /p", /p/ gets "= /p/" (so /p is not matched).
      const prefix = path.endsWith('/') ? path : `${path}/`;
      return [prefix, `= ${path}`];
    }
    default:
      refuse(`${ingressName}: pathType ${pathType} for "${path}"`);
  }
}

function upstreamName(namespace: string, service: string, port: string | number): string {
  return `${namespace}-${service}-${String(port)}`;
}

/** The nginx.conf for the given Ingress objects; throws on anything it does not model. */
export function translate(
  ingresses: IIngress[],
  controllerValues: ControllerValues,
  settings: NginxSettings,
): string {
  const defaults = readController(controllerValues);
  const servers = new Map<string, Map<string, Location>>();
  const zones = new Map<string, NonNullable<IngressSettings['zone']>>();
  const upstreams = new Map<string, string[]>();

  for (const ingress of ingresses) {
    const ingressSettings = readAnnotations(ingress, settings.namespace, defaults);
    const name = ingressSettings.name;
    const spec = ingress.spec ?? refuse(`${name}: no spec`);
    if (spec.ingressClassName !== defaults.ingressClass)
      refuse(
        `${name}: ingressClassName ${String(spec.ingressClassName)} (the controller serves ${defaults.ingressClass})`,
      );
    if (spec.tls !== undefined && spec.tls.length > 0) refuse(`${name}: TLS`);
    if (spec.defaultBackend !== undefined) refuse(`${name}: spec.defaultBackend`);
    if (ingressSettings.zone) zones.set(ingressSettings.zone.name, ingressSettings.zone);

    for (const rule of spec.rules ?? []) {
      if (!rule.host) refuse(`${name}: a rule without host`);
      if (rule.host.includes('*')) refuse(`${name}: wildcard host ${rule.host}`);
      const locations = servers.get(rule.host) ?? new Map<string, Location>();
      servers.set(rule.host, locations);
      for (const path of rule.http?.paths ?? []) {
        const backend = path.backend.service ?? refuse(`${name}: a backend that is not a Service`);
        const port = backend.port?.name ?? backend.port?.number ?? refuse(`${name}: a backend without port`);
        const upstream = upstreamName(settings.namespace, backend.name, port);
        upstreams.set(upstream, settings.endpoints(backend.name, port));
        for (const match of locationsFor(path.path ?? '/', path.pathType, name)) {
          const existing = locations.get(match);
          // ingress-nginx would silently keep one of them; the emulation cannot know which.
          if (existing)
            refuse(`location ${match} of ${rule.host} in both ${existing.ingress.name} and ${name}`);
          locations.set(match, { match, ingress: ingressSettings, upstream });
        }
      }
    }
  }
  if (servers.size === 0) refuse('no Ingress rules');

  const p = settings.prefix;
  const lines: string[] = [
    `# Generated by k8s-tests/local/nginx-config.ts (generation ${settings.generation}); do not edit.`,
    `load_module ${settings.headersMoreModule};`,
    'worker_processes 1;',
    `pid ${p}/nginx.pid;`,
    'events { worker_connections 1024; }',
    'http {',
    `  access_log ${p}/access.log;`,
    `  client_body_temp_path ${p}/client_body;`,
    `  proxy_temp_path ${p}/proxy;`,
    `  fastcgi_temp_path ${p}/fastcgi;`,
    `  uwsgi_temp_path ${p}/uwsgi;`,
    `  scgi_temp_path ${p}/scgi;`,
    '  # ingress-nginx defaults that shape what a client observes.',
    '  server_tokens off;',
    '  more_clear_headers Server;',
    '  server_name_in_redirect off;',
    // The template sets it off on http and on each location (UsePortInRedirects false); http suffices.
    '  port_in_redirect off;',
    '  client_max_body_size 1m;',
    '  proxy_http_version 1.1;',
    '  proxy_buffering off;',
    '  proxy_request_buffering on;',
    "  # The client's X-Request-ID goes through; without one, nginx's own id (generate-request-id).",
    '  map $http_x_request_id $req_id {',
    '    default $http_x_request_id;',
    '    "" $request_id;',
    '  }',
    `  limit_req_status ${defaults.limitReqStatus};`,
  ];
  for (const zone of zones.values())
    lines.push(`  limit_req_zone $binary_remote_addr zone=${zone.name}:5m rate=${zone.rpm}r/m;`);
  for (const [name, endpoints] of upstreams) {
    lines.push(`  upstream ${name} {`);
    // No ready endpoint: a placeholder never reached (like the template's upstream_balancer), since
    // the locations of such a backend answer 503 first (below).
    if (endpoints.length === 0) lines.push('    server 0.0.0.1;');
    // ingress-nginx's Lua balancer does no passive health marking (max_fails=0).
    for (const endpoint of endpoints) lines.push(`    server ${endpoint} max_fails=0;`);
    lines.push('    keepalive 320;', '    keepalive_timeout 60s;', '    keepalive_requests 10000;', '  }');
  }
  // Hosts without a rule get the controller's default backend: 404.
  lines.push(
    '  server {',
    `    listen 127.0.0.1:${settings.listenPort} default_server;`,
    '    server_name _;',
    '    location / { return 404; }',
    '  }',
  );
  for (const [host, locations] of servers) {
    lines.push('  server {', `    listen 127.0.0.1:${settings.listenPort};`, `    server_name ${host};`);
    for (const location of locations.values()) {
      const { ingress } = location;
      lines.push(`    location ${location.match} {`);
      if ((upstreams.get(location.upstream) ?? []).length === 0)
        // ingress-nginx's balancer has no balancer for a backend without endpoints and answers 503
        // in the rewrite phase (balancer.lua rewrite()), before limit_req's preaccess phase: such
        // requests are not counted. `return` also ends the request in the rewrite phase.
        lines.push('      return 503;');
      if (ingress.zone)
        lines.push(`      limit_req zone=${ingress.zone.name} burst=${ingress.zone.burst} nodelay;`);
      lines.push(
        `      proxy_connect_timeout ${ingress.connectTimeout}s;`,
        `      proxy_send_timeout ${ingress.sendTimeout}s;`,
        `      proxy_read_timeout ${ingress.readTimeout}s;`,
        '      proxy_set_header Host $host;',
        '      proxy_set_header X-Request-ID $req_id;',
        '      proxy_set_header X-Real-IP $remote_addr;',
        '      proxy_set_header X-Forwarded-For $remote_addr;',
        '      proxy_set_header X-Forwarded-Host $host;',
        '      proxy_set_header X-Forwarded-Port $server_port;',
        '      proxy_set_header X-Forwarded-Proto $scheme;',
        '      proxy_set_header X-Scheme $scheme;',
        '      proxy_set_header Connection "";',
        '      proxy_set_header Proxy "";',
        // Whether a failed try goes to another replica: the proxy-next-upstream annotations.
        `      proxy_next_upstream ${nextUpstreamDirective(ingress.nextUpstream)};`,
        '      proxy_next_upstream_timeout 0;',
        `      proxy_next_upstream_tries ${ingress.nextUpstreamTries};`,
      );
      // No URI part: nginx passes the request URI exactly as the client sent it.
      lines.push(`      proxy_pass http://${location.upstream};`, '    }');
    }
    lines.push('  }');
  }
  lines.push(
    '  server {',
    `    listen 127.0.0.1:${settings.statusPort};`,
    `    location = /generation { return 200 "${settings.generation}"; }`,
    '  }',
    '}',
    '',
  );
  return lines.join('\n');
}
