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
import { checkPath, defaultServer, emulatedConf, HostLocations, hostServer, refusal } from './proxy-config';
import type { EmulationSettings, Refuse } from './proxy-config';

/** The part of the ingress-nginx Helm values the translation reads (k8s-tests/ingress-nginx-values.yaml). */
export interface ControllerValues {
  controller?: Record<string, unknown>;
  [key: string]: unknown;
}

/** The emulation's settings, and the headers-more module the controller's nginx is built with. */
export interface NginxSettings extends EmulationSettings {
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

/** The time-outs, each named the same as a controller ConfigMap key and as an annotation. */
const TIMEOUTS = {
  'proxy-connect-timeout': 'connectTimeout',
  'proxy-read-timeout': 'readTimeout',
  'proxy-send-timeout': 'sendTimeout',
} as const;

type Timeouts = Record<(typeof TIMEOUTS)[keyof typeof TIMEOUTS], number>;

function timeoutKey(key: string): keyof typeof TIMEOUTS | undefined {
  return Object.hasOwn(TIMEOUTS, key) ? (key as keyof typeof TIMEOUTS) : undefined;
}

/** What each Ingress's annotations may change, starting from the controller's values. */
interface PerIngress extends Timeouts {
  nextUpstream: string;
  nextUpstreamTries: number;
}

interface Defaults {
  limitReqStatus: number;
  /** The controller's location-snippet, written into every location (only the request id's is modelled). */
  locationSnippet?: string;
  ingress: PerIngress;
  ingressClass: string;
}

const refuse: Refuse = refusal('UnmodelledIngressFeature', 'ingress');

/** An integer as annotations and ConfigMap keys write it (a string; YAML may make it a number). */
function integer(value: unknown, what: string, min: 0 | 1 = 1): number {
  const text = typeof value === 'number' ? String(value) : value;
  if (typeof text !== 'string' || !/^(0|[1-9]\d*)$/.test(text) || Number(text) < min)
    refuse(`${what} must be a ${min === 1 ? 'positive' : 'non-negative'} integer, got ${String(value)}`);
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

/**
 * The one location-snippet modelled: the client's X-Request-ID replaced by nginx's own
 * $request_id before the template's `map $http_x_request_id $req_id` reads it, so the id sent
 * upstream (and logged as $req_id) is always the proxy's. headers-more's more_set_input_headers
 * runs in the rewrite phase, before proxy_set_header's values are evaluated.
 */
export const REQUEST_ID_SNIPPET = 'more_set_input_headers "X-Request-ID: $request_id";';

function requestIdSnippet(value: unknown, what: string): string {
  if (typeof value !== 'string' || value.trim() !== REQUEST_ID_SNIPPET)
    refuse(`controller.config.${what}: only ${REQUEST_ID_SNIPPET} is modelled, got ${String(value)}`);
  return REQUEST_ID_SNIPPET;
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
    ingress: {
      connectTimeout: 5,
      readTimeout: 60,
      sendTimeout: 60,
      nextUpstream: 'error timeout',
      nextUpstreamTries: 3,
    },
    ingressClass,
  };
  const config = (controller.config ?? {}) as Record<string, unknown>;
  for (const [key, value] of Object.entries(config)) {
    const timeout = timeoutKey(key);
    if (timeout) {
      defaults.ingress[TIMEOUTS[timeout]] = integer(value, key);
      continue;
    }
    switch (key) {
      case 'limit-req-status-code':
        defaults.limitReqStatus = integer(value, key);
        break;
      case 'location-snippet':
        defaults.locationSnippet = requestIdSnippet(value, key);
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

interface IngressSettings extends PerIngress {
  name: string;
  zone?: { name: string; rpm: number; burst: number };
}

function readAnnotations(ingress: IIngress, namespace: string, defaults: Defaults): IngressSettings {
  const name = ingress.metadata?.name ?? refuse('an Ingress without a name');
  const annotations = ingress.metadata?.annotations ?? {};
  const settings: IngressSettings = { name, ...defaults.ingress };
  let rpm: number | undefined;
  // ingress-nginx's default limit-burst-multiplier.
  let multiplier = 5;
  for (const [key, value] of Object.entries(annotations)) {
    if (key === 'kubernetes.io/ingress.class') refuse(`${name}: the legacy ${key} annotation`);
    // Annotations of other tools (cert-manager, external-dns…) do not reach nginx.conf.
    if (!key.startsWith(PREFIX)) continue;
    const short = key.slice(PREFIX.length);
    const what = `${name}: ${key}`;
    const timeout = timeoutKey(short);
    if (timeout) {
      settings[TIMEOUTS[timeout]] = integer(value, what);
      continue;
    }
    switch (short) {
      case 'limit-rpm':
        rpm = integer(value, what);
        break;
      case 'limit-burst-multiplier':
        multiplier = integer(value, what);
        break;
      case 'proxy-next-upstream':
        settings.nextUpstream = nextUpstream(value, what);
        break;
      case 'proxy-next-upstream-tries':
        // nginx: 0 means no limit.
        settings.nextUpstreamTries = integer(value, what, 0);
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
  // Characters nginx would read as syntax, or that ingress-nginx treats as a regex.
  checkPath(path, /[\s;{}"'\\^$*+?()[\]|~]/, ingressName, refuse);
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

/** Where the Ingresses lead: the locations of each host, the rate-limit zones and the upstreams. */
interface Routing {
  servers: HostLocations<Location>;
  zones: Map<string, NonNullable<IngressSettings['zone']>>;
  upstreams: Map<string, string[]>;
}

/** Reads every Ingress into `routing`, refusing what the controller would serve differently. */
function readIngresses(
  ingresses: IIngress[],
  defaults: Defaults,
  settings: NginxSettings,
  { servers, zones, upstreams }: Routing,
): void {
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
      servers.host(rule.host);
      for (const path of rule.http?.paths ?? []) {
        const backend = path.backend.service ?? refuse(`${name}: a backend that is not a Service`);
        const port = backend.port?.name ?? backend.port?.number ?? refuse(`${name}: a backend without port`);
        const upstream = upstreamName(settings.namespace, backend.name, port);
        upstreams.set(upstream, settings.endpoints(backend.name, port));
        for (const match of locationsFor(path.path ?? '/', path.pathType, name))
          servers.add(rule.host, match, { match, ingress: ingressSettings, upstream });
      }
    }
  }
}

/** The http context before the servers: the controller's defaults, rate-limit zones and upstreams. */
function httpContext(defaults: Defaults, { zones, upstreams }: Routing): string[] {
  const lines: string[] = [
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
    // The controller's location-snippet (REQUEST_ID_SNIPPET) replaces the client's header first.
    "  # The incoming X-Request-ID; without one, nginx's own id (generate-request-id).",
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
  return lines;
}

/** One location of a host's server: the 503 without endpoints, the limit, then the proxying. */
function locationBlock(location: Location, upstreams: Map<string, string[]>, defaults: Defaults): string[] {
  const { ingress } = location;
  const lines = [`    location ${location.match} {`];
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
  // The template writes the controller's location-snippet after the proxy settings.
  if (defaults.locationSnippet) lines.push(`      ${defaults.locationSnippet}`);
  // No URI part: nginx passes the request URI exactly as the client sent it.
  lines.push(`      proxy_pass http://${location.upstream};`, '    }');
  return lines;
}

/** The nginx.conf for the given Ingress objects; throws on anything it does not model. */
export function translate(
  ingresses: IIngress[],
  controllerValues: ControllerValues,
  settings: NginxSettings,
): string {
  const defaults = readController(controllerValues);
  const routing: Routing = {
    // ingress-nginx would silently keep one of two owners of a location; the emulation cannot know which.
    servers: new HostLocations<Location>(refuse, (location) => location.ingress.name),
    zones: new Map(),
    upstreams: new Map(),
  };
  readIngresses(ingresses, defaults, settings, routing);
  if (routing.servers.byHost.size === 0) refuse('no Ingress rules');

  const lines = httpContext(defaults, routing);
  // Hosts without a rule get the controller's default backend: 404.
  lines.push(...defaultServer(settings, ['    server_name _;', '    location / { return 404; }']));
  for (const [host, locations] of routing.servers.byHost) {
    lines.push(...hostServer(settings, host));
    for (const location of locations.values())
      lines.push(...locationBlock(location, routing.upstreams, defaults));
    lines.push('  }');
  }
  return emulatedConf('k8s-tests/local/nginx-config.ts', settings, lines, [settings.headersMoreModule]);
}
