/**
 * Translates rendered Gateway API HTTPRoutes and NGINX Gateway Fabric policies (RateLimitPolicy,
 * ProxySettingsPolicy, ObservabilityPolicy), the Gateway they attach to and NGINX Gateway Fabric's
 * Helm values into an nginx.conf, the way NGINX Gateway Fabric v2.6.7 configures its nginx for the
 * features this chart uses. Anything it does not model throws, as the Ingress translation
 * (nginx-config.ts) does.
 *
 * Source read (repository nginx/nginx-gateway-fabric, tag v2.6.7, commit
 * 5e34a17a8f7787e90f41d1af91258a556f0795b4):
 * - internal/controller/nginx/config/servers.go: createPath (Exact "= /p", PathPrefix "/p"),
 *   initializeExternalLocations (a PathPrefix without trailing slash gets "/p/" and "= /p"),
 *   createDefaultRootLocation ("= /" answers 404 when no rule has the path "/"),
 *   createBaseProxySetHeaders and createProxyPass (no URI part on external locations);
 * - internal/controller/nginx/config/servers_template.go: the default server answers 404, the
 *   policies' includes come first in a location, then proxy_http_version 1.1, headers, proxy_pass;
 * - internal/controller/nginx/config/upstreams.go + upstreams_template.go: upstream
 *   "<namespace>_<service>_<port>", "random two least_conn", zone 512k, keepalive 16; an upstream
 *   without endpoints points at the unix socket of a server that answers 503;
 * - internal/controller/nginx/config/base_http_config_template.go: the $gw_api_compliant_host and
 *   $connection_keepalive maps; internal/controller/state/dataplane/configuration.go:
 *   server_tokens off unless NginxProxy says otherwise;
 * - internal/controller/nginx/config/policies/ratelimit/generator.go: limit_req_zone in the http
 *   context (zone "<namespace>_rl_<policy>_rule<i>", default size 10m, key $binary_remote_addr),
 *   limit_req (burst, nodelay, delay), limit_req_status and limit_req_log_level in each location of
 *   the targeted route;
 * - internal/controller/nginx/config/policies/proxysettings/generator.go: proxy_connect_timeout,
 *   proxy_read_timeout, proxy_send_timeout in each location of the targeted routes;
 * - internal/controller/state/graph/httproute.go (checkForUnsupportedHTTPFields): rule name,
 *   timeouts and retry are accepted with a warning and ignored, so the emulation refuses them;
 * - internal/controller/nginx/config/policies/observability/validator.go: an ObservabilityPolicy
 *   is not accepted without telemetry in the NginxProxy (ValidateGlobalSettings), and then
 *   generator.go writes nothing; the NginxProxy settings (nginx.config) are refused here.
 * The mapping and its gaps are listed in k8s-tests/README.md.
 */
import { checkPath, defaultServer, emulatedConf, HostLocations, hostServer, refusal } from './proxy-config';
import type { EmulationSettings, Refuse } from './proxy-config';
import type { KubeObject } from '../../tools/harness/manifests';

/** NGF's templates clear no header (no headers-more module): `server_tokens off` leaves `Server: nginx`. */
export type NginxSettings = EmulationSettings;

/** A rendered object, as read from helm template or k8s-tests/gateway.yaml. */
export interface GatewayObject extends KubeObject {
  spec?: unknown;
}

/** The part of NGINX Gateway Fabric's Helm values the translation reads (k8s-tests/nginx-gateway-fabric-values.yaml). */
export interface NginxGatewayFabricValues {
  nginxGateway?: Record<string, unknown>;
  nginx?: Record<string, unknown>;
  [key: string]: unknown;
}

const GATEWAY_API = 'gateway.networking.k8s.io';
const NGF_API = 'gateway.nginx.org/v1alpha1';
const NGF_API_V1ALPHA2 = 'gateway.nginx.org/v1alpha2';
/** Upstream answering 503 when a backend has no ready endpoint (NGF: nginx-503-server.sock). */
const NO_ENDPOINTS_SOCKET = 'nginx-503-server.sock';

const refuse: Refuse = refusal('UnmodelledGatewayFeature', 'Gateway');

type Fields = Record<string, unknown>;

function fields(value: unknown, what: string): Fields {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) refuse(`${what} is not an object`);
  return value as Fields;
}

/** The object's keys must all be modelled; `reasons` names why a known key is refused. */
function onlyKeys(
  value: Fields,
  allowed: string[],
  what: string,
  reasons: Record<string, string> = {},
): void {
  for (const key of Object.keys(value)) {
    if (allowed.includes(key)) continue;
    refuse(`${what}.${key}${reasons[key] ? ` (${reasons[key]})` : ''}`);
  }
}

/** The object at `value`, every key of which must be modelled (`reasons` as for onlyKeys). */
function modelled(value: unknown, what: string, allowed: string[], reasons?: Record<string, string>): Fields {
  const object = fields(value, what);
  onlyKeys(object, allowed, what, reasons);
  return object;
}

function list(value: unknown, what: string): unknown[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) refuse(`${what} is not a list`);
  return value;
}

function text(value: unknown, what: string): string {
  if (typeof value !== 'string' || value === '') refuse(`${what} must be a non-empty string`);
  return value;
}

function optionalText(value: unknown, what: string): string | undefined {
  return value === undefined ? undefined : text(value, what);
}

function integer(value: unknown, what: string, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min)
    refuse(`${what} must be an integer of at least ${min}, got ${String(value)}`);
  return value;
}

/** NGF's Duration (apis/v1alpha1/shared_types.go): up to 4 digits and a unit; nginx reads it as is. */
function duration(value: unknown, what: string): string {
  const given = text(value, what);
  if (!/^[0-9]{1,4}(ms|s|m|h)?$/.test(given)) refuse(`${what}: duration ${given}`);
  return given;
}

interface Listener {
  name: string;
  port: number;
  hostname?: string;
  fromAllNamespaces: boolean;
}

interface Gateway {
  name: string;
  namespace: string;
  listeners: Listener[];
}

function readFabricValues(values: NginxGatewayFabricValues): { gatewayClassName: string } {
  onlyKeys(values, ['nginxGateway', 'nginx'], 'NGINX Gateway Fabric values');
  // Keys that shape how the control plane runs, not the nginx.conf it writes.
  const control = modelled(
    values.nginxGateway ?? {},
    'nginxGateway',
    ['gatewayClassName', 'replicas', 'resources', 'nodeSelector', 'tolerations', 'productTelemetry'],
    {
      snippets: 'snippets change nginx.conf freely',
      snippetsFilters: 'snippets change nginx.conf freely',
      gwAPIExperimentalFeatures: 'experimental features',
    },
  );
  const data = modelled(values.nginx ?? {}, 'nginx', ['replicas', 'service', 'container', 'pod', 'kind'], {
    config: 'NginxProxy settings (client address rewriting, IP family, telemetry…) change nginx.conf',
    plus: 'NGINX Plus',
    autoscaling: 'several nginx replicas',
  });
  // Each nginx replica keeps its own limit_req counters; the emulation is one nginx.
  if (data.replicas !== undefined && data.replicas !== 1)
    refuse('nginx.replicas other than 1 (counters are per nginx replica)');
  modelled(data.container ?? {}, 'nginx.container', ['hostPorts', 'resources']);
  return { gatewayClassName: optionalText(control.gatewayClassName, 'gatewayClassName') ?? 'nginx' };
}

function readGateway(object: GatewayObject, gatewayClassName: string): Gateway {
  if (object.apiVersion !== `${GATEWAY_API}/v1` || object.kind !== 'Gateway')
    refuse(`${object.apiVersion} ${object.kind} as the Gateway`);
  const name = object.metadata.name;
  const namespace = text(object.metadata.namespace, `Gateway ${name}: metadata.namespace`);
  const spec = modelled(object.spec, `Gateway ${name}: spec`, ['gatewayClassName', 'listeners']);
  if (spec.gatewayClassName !== gatewayClassName)
    refuse(
      `Gateway ${name}: class ${String(spec.gatewayClassName)} (the controller serves ${gatewayClassName})`,
    );
  const listeners = list(spec.listeners, 'listeners').map((entry, i): Listener => {
    const listener = fields(entry, `Gateway ${name}: listeners[${i}]`);
    onlyKeys(
      listener,
      ['name', 'protocol', 'port', 'hostname', 'allowedRoutes'],
      `Gateway ${name}: listener`,
      {
        tls: 'TLS',
      },
    );
    const listenerName = text(listener.name, 'listener name');
    if (listener.protocol !== 'HTTP')
      refuse(`listener ${listenerName}: protocol ${String(listener.protocol)}`);
    const hostname = optionalText(listener.hostname, `listener ${listenerName}: hostname`);
    if (hostname?.includes('*')) refuse(`listener ${listenerName}: wildcard hostname ${hostname}`);
    const allowed = fields(listener.allowedRoutes ?? {}, 'allowedRoutes');
    onlyKeys(allowed, ['namespaces'], `listener ${listenerName}: allowedRoutes`, { kinds: 'route kinds' });
    const from = fields(allowed.namespaces ?? {}, 'allowedRoutes.namespaces').from ?? 'Same';
    if (from !== 'Same' && from !== 'All')
      refuse(`listener ${listenerName}: allowedRoutes from ${JSON.stringify(from)}`);
    return {
      name: listenerName,
      port: integer(listener.port, `listener ${listenerName}: port`, 1),
      ...(hostname ? { hostname } : {}),
      fromAllNamespaces: from === 'All',
    };
  });
  if (listeners.length === 0) refuse(`Gateway ${name} has no listener`);
  return { name, namespace, listeners };
}

interface Redirect {
  code: number;
  /** ReplaceFullPath: the path the redirect points at. */
  path: string;
  /** The Gateway listener's port, which NGF writes into the redirect's address. */
  port: number;
}

interface PathRule {
  route: string;
  /** nginx location modifiers and paths, e.g. "= /login", "/". */
  locations: string[];
  path: string;
  /**
   * Either a backend's upstream ("<namespace>_<service>_<port>") or a RequestRedirect filter
   * (Gateway API allows no backend with a redirect).
   */
  upstream?: string;
  redirect?: Redirect;
  /** A backend's RequestHeaderModifier `set` entries, name and value, in order. */
  setHeaders?: { name: string; value: string }[];
}

/** A header value NGF accepts (validation/generic.go, validateEscapedStringWithNginxVars): text or nginx variables, no quotes. */
const HEADER_VALUE = /^(?:[^$"\\\s]|\$(?:\{[a-z][a-z0-9_]*\}|[a-z][a-z0-9_]*))+$/;

/**
 * A RequestHeaderModifier with `set` only, the one form modelled: NGF writes each entry as a
 * proxy_set_header before its own base headers and drops a base header of the same name
 * (servers.go generateProxySetHeaders).
 */
function readHeaderModifier(value: unknown, what: string): { name: string; value: string }[] {
  const filter = modelled(value, what, ['type', 'requestHeaderModifier']);
  if (filter.type !== 'RequestHeaderModifier')
    refuse(`${what}: filter ${String(filter.type)} beside a backend`);
  const modifier = modelled(filter.requestHeaderModifier, `${what}.requestHeaderModifier`, ['set'], {
    add: 'added headers',
    remove: 'removed headers',
  });
  return list(modifier.set, `${what}.requestHeaderModifier.set`).map((entry, i) => {
    const header = modelled(entry, `${what}.set[${i}]`, ['name', 'value']);
    const name = text(header.name, `${what}.set[${i}].name`);
    if (!/^[A-Za-z0-9-]+$/.test(name)) refuse(`${what}: header name ${name}`);
    const headerValue = text(header.value, `${what}.set[${i}].value`);
    if (!HEADER_VALUE.test(headerValue)) refuse(`${what}: header value ${headerValue}`);
    return { name, value: headerValue };
  });
}

/** A RequestRedirect filter with a full-path replacement and a status code, the one form modelled. */
function readRedirect(value: unknown, what: string, port: number): Redirect {
  const filter = modelled(value, what, ['type', 'requestRedirect']);
  if (filter.type !== 'RequestRedirect') refuse(`${what}: filter ${String(filter.type)}`);
  const redirect = modelled(filter.requestRedirect, `${what}.requestRedirect`, ['path', 'statusCode'], {
    hostname: 'redirect host names',
    port: 'redirect ports',
    scheme: 'redirect schemes',
  });
  const path = modelled(redirect.path, `${what}.requestRedirect.path`, ['type', 'replaceFullPath']);
  if (path.type !== 'ReplaceFullPath') refuse(`${what}: path modifier ${String(path.type)}`);
  const target = text(path.replaceFullPath, `${what}: replaceFullPath`);
  if (!/^\/[A-Za-z0-9/._-]*$/.test(target)) refuse(`${what}: redirect path ${target}`);
  // servers.go createReturnAndRewriteConfigForRedirectFilter: 302 unless a code is given.
  const code =
    redirect.statusCode === undefined ? 302 : integer(redirect.statusCode, `${what}: statusCode`, 300);
  return { code, path: target, port };
}

interface RouteInfo {
  name: string;
  hosts: string[];
  rules: PathRule[];
}

function locationsFor(type: string, path: string, what: string): string[] {
  // Characters nginx would read as syntax (NGF's validator refuses most of them too).
  checkPath(path, /[\s;{}"'\\^$*+?()[\]|~#]/, what, refuse);
  switch (type) {
    case 'Exact':
      return [`= ${path}`];
    case 'PathPrefix':
      // servers.go initializeExternalLocations: /p also matches exactly, /p/ covers the rest.
      if (path.endsWith('/')) return [path];
      return [`${path}/`, `= ${path}`];
    default:
      refuse(`${what}: path match type ${type}`);
  }
}

/** What reading one HTTPRoute's rules needs: its name, where it attaches and the upstreams so far. */
interface RouteContext {
  name: string;
  /** "HTTPRoute <name>", the start of its refusals. */
  what: string;
  namespace: string;
  listener: Listener;
  endpoints: NginxSettings['endpoints'];
  upstreams: Map<string, string[]>;
}

/** The one listener of the emulated Gateway the route attaches to through its one parentRef. */
function routeListener(spec: Fields, what: string, namespace: string, gateway: Gateway): Listener {
  const parents = list(spec.parentRefs, `${what}: parentRefs`);
  if (parents.length !== 1) refuse(`${what}: ${parents.length} parentRefs (one Gateway is modelled)`);
  const parent = fields(parents[0], `${what}: parentRefs[0]`);
  onlyKeys(parent, ['group', 'kind', 'name', 'namespace', 'sectionName'], `${what}: parentRef`, {
    port: 'attaching by port',
  });
  if ((parent.group ?? GATEWAY_API) !== GATEWAY_API || (parent.kind ?? 'Gateway') !== 'Gateway')
    refuse(`${what}: parent ${String(parent.group)}/${String(parent.kind)}`);
  const parentNamespace = optionalText(parent.namespace, `${what}: parent namespace`) ?? namespace;
  if (parent.name !== gateway.name || parentNamespace !== gateway.namespace)
    refuse(`${what}: parent Gateway ${parentNamespace}/${String(parent.name)} is not the emulated one`);
  const sectionName = optionalText(parent.sectionName, `${what}: sectionName`);
  const listeners = gateway.listeners.filter(
    (l) =>
      (sectionName === undefined || l.name === sectionName) &&
      (l.fromAllNamespaces || namespace === gateway.namespace),
  );
  if (listeners.length !== 1)
    refuse(`${what}: attaches to ${listeners.length} listeners of the Gateway (one is modelled)`);
  return listeners[0] as Listener;
}

/** The route's host names: at least one, no wildcard, each the listener's if it names one. */
function routeHosts(spec: Fields, what: string, listener: Listener): string[] {
  const hosts = list(spec.hostnames, `${what}: hostnames`).map((h) => text(h, `${what}: hostname`));
  if (hosts.length === 0) refuse(`${what}: no hostnames (every host)`);
  for (const host of hosts) {
    if (host.includes('*')) refuse(`${what}: wildcard hostname ${host}`);
    if (listener.hostname !== undefined && listener.hostname !== host)
      refuse(`${what}: hostname ${host} outside listener ${listener.name}'s ${listener.hostname}`);
  }
  return hosts;
}

/** Where a rule sends its requests: one Service backend (with headers set), or a redirect. */
type RuleTarget =
  { upstream: string; setHeaders?: { name: string; value: string }[] } | { redirect: Redirect };

/** Where rule `i` sends its requests: a redirect, or one Service (its upstream recorded) with its headers. */
function ruleTarget(rule: Fields, i: number, route: RouteContext): RuleTarget {
  const { what, namespace, listener } = route;
  const backends = list(rule.backendRefs, `${what}: rules[${i}].backendRefs`);
  const filters = list(rule.filters, `${what}: rules[${i}].filters`);
  if (filters.length > 0 && backends.length === 0) {
    // A redirect answers by itself (servers.go updateLocation returns before proxy settings).
    if (filters.length !== 1)
      refuse(`${what}: rules[${i}] with ${filters.length} filters and ${backends.length} backendRefs`);
    return { redirect: readRedirect(filters[0], `${what}: rules[${i}].filters[0]`, listener.port) };
  }
  if (filters.length > 1) refuse(`${what}: rules[${i}] with ${filters.length} filters beside a backend`);
  if (backends.length !== 1)
    refuse(`${what}: rules[${i}] has ${backends.length} backendRefs (one is modelled)`);
  const ref = modelled(backends[0], `${what}: backendRef`, ['group', 'kind', 'name', 'port'], {
    namespace: 'cross-namespace backends',
    weight: 'weights',
    filters: 'backend filters',
  });
  if ((ref.group ?? '') !== '' || (ref.kind ?? 'Service') !== 'Service')
    refuse(`${what}: backend ${String(ref.group)}/${String(ref.kind)} is not a Service`);
  const service = text(ref.name, `${what}: backendRef name`);
  const port = integer(ref.port, `${what}: backendRef port`, 1);
  const upstream = `${namespace}_${service}_${port}`;
  route.upstreams.set(upstream, route.endpoints(service, port));
  return filters.length === 1
    ? { upstream, setHeaders: readHeaderModifier(filters[0], `${what}: rules[${i}].filters[0]`) }
    : { upstream };
}

/** Rule `i` of the route: one PathRule per path match, each with the rule's target. */
function readRule(entry: unknown, i: number, route: RouteContext): PathRule[] {
  const { name, what } = route;
  const rule = modelled(entry, `${what}: rules[${i}]`, ['matches', 'backendRefs', 'filters'], {
    timeouts: 'NGINX Gateway Fabric ignores HTTPRoute timeouts; use a ProxySettingsPolicy',
    retry: 'NGINX Gateway Fabric ignores HTTPRoute retry',
    name: 'NGINX Gateway Fabric ignores rule names',
    sessionPersistence: 'session persistence',
  });
  const target = ruleTarget(rule, i, route);

  // Gateway API: a rule without matches matches every path (PathPrefix /).
  const matches =
    rule.matches === undefined
      ? [{ path: { type: 'PathPrefix', value: '/' } }]
      : list(rule.matches, 'matches');
  return matches.map((m, j): PathRule => {
    // Method, header or query matches make NGF route through its njs module: not modelled.
    const match = modelled(m, `${what}: rules[${i}].matches[${j}]`, ['path']);
    const pathMatch = fields(match.path ?? {}, 'path');
    onlyKeys(pathMatch, ['type', 'value'], `${what}: path`);
    const type = optionalText(pathMatch.type, 'path type') ?? 'PathPrefix';
    const path = optionalText(pathMatch.value, 'path value') ?? '/';
    return { route: name, locations: locationsFor(type, path, what), path, ...target };
  });
}

function readRoute(
  object: GatewayObject,
  namespace: string,
  gateway: Gateway,
  endpoints: NginxSettings['endpoints'],
  upstreams: Map<string, string[]>,
): RouteInfo {
  const name = object.metadata.name;
  const what = `HTTPRoute ${name}`;
  const spec = modelled(object.spec, `${what}: spec`, ['parentRefs', 'hostnames', 'rules']);
  const listener = routeListener(spec, what, namespace, gateway);
  const hosts = routeHosts(spec, what, listener);
  const route: RouteContext = { name, what, namespace, listener, endpoints, upstreams };
  const rules = list(spec.rules, `${what}: rules`).flatMap((entry, i) => readRule(entry, i, route));
  return { name, hosts, rules };
}

interface RateLimitRule {
  zone: string;
  zoneSize: string;
  key: string;
  rate: string;
  burst: number;
  delay: number;
  noDelay: boolean;
}

/** The ProxySettingsPolicy time-outs, each written as proxy_<name>_timeout, in this order. */
const PROXY_TIMEOUTS = ['connect', 'read', 'send'] as const;

interface RouteDirectives {
  rateLimit?: { rules: RateLimitRule[]; rejectCode?: number; logLevel?: string };
  proxy?: Partial<Record<(typeof PROXY_TIMEOUTS)[number], string>>;
}

function targets(spec: Fields, what: string, routes: Set<string>): string[] {
  return list(spec.targetRefs, `${what}: targetRefs`).map((entry) => {
    const ref = modelled(entry, `${what}: targetRef`, ['group', 'kind', 'name']);
    if (ref.group !== GATEWAY_API || ref.kind !== 'HTTPRoute')
      refuse(
        `${what}: target ${String(ref.group)}/${String(ref.kind)} (policies on HTTPRoutes are modelled)`,
      );
    const name = text(ref.name, `${what}: target name`);
    // On a cluster the policy would just not apply; here that would prove nothing.
    if (!routes.has(name)) refuse(`${what}: targets HTTPRoute ${name}, which is not rendered`);
    return name;
  });
}

/** A RateLimitPolicy's spec (`what` names the policy); its zones are named `<zone>_rule<i>`. */
function readRateLimitPolicy(spec: Fields, what: string, zone: string): RouteDirectives['rateLimit'] {
  const rateLimit = fields(spec.rateLimit ?? {}, `${what}: rateLimit`);
  onlyKeys(rateLimit, ['local', 'rejectCode', 'logLevel'], `${what}: rateLimit`, { dryRun: 'dry-run mode' });
  const local = modelled(rateLimit.local ?? {}, `${what}: rateLimit.local`, ['rules']);
  const rules = list(local.rules, 'rules').map((entry, i): RateLimitRule => {
    const rule = fields(entry, `${what}: rules[${i}]`);
    onlyKeys(rule, ['key', 'rate', 'burst', 'noDelay', 'delay', 'zoneSize'], `${what}: rules[${i}]`);
    const rate = text(rule.rate, `${what}: rate`);
    if (!/^\d+r\/[sm]$/.test(rate)) refuse(`${what}: rate ${rate}`);
    const key = optionalText(rule.key, `${what}: key`) ?? '$binary_remote_addr';
    if (!/^(?:[^ \t\r\n;{}#$]+|\$\w+)+$/.test(key)) refuse(`${what}: key ${key}`);
    const zoneSize = optionalText(rule.zoneSize, `${what}: zoneSize`) ?? '10m';
    if (!/^\d{1,4}(k|m|g)?$/.test(zoneSize)) refuse(`${what}: zoneSize ${zoneSize}`);
    if (rule.noDelay === true && rule.delay !== undefined) refuse(`${what}: noDelay together with delay`);
    return {
      zone: `${zone}_rule${i}`,
      zoneSize,
      key,
      rate,
      burst: rule.burst === undefined ? 0 : integer(rule.burst, `${what}: burst`, 0),
      delay: rule.delay === undefined ? 0 : integer(rule.delay, `${what}: delay`, 0),
      noDelay: rule.noDelay === true,
    };
  });
  const logLevel = optionalText(rateLimit.logLevel, `${what}: logLevel`);
  if (logLevel !== undefined && !['info', 'notice', 'warn', 'error'].includes(logLevel))
    refuse(`${what}: logLevel ${logLevel}`);
  return {
    rules,
    ...(rateLimit.rejectCode === undefined
      ? {}
      : { rejectCode: integer(rateLimit.rejectCode, `${what}: rejectCode`, 400) }),
    ...(logLevel ? { logLevel } : {}),
  };
}

function readProxySettingsPolicy(spec: Fields, what: string): RouteDirectives['proxy'] {
  const timeout = modelled(spec.timeout ?? {}, `${what}: timeout`, [...PROXY_TIMEOUTS]);
  const given = PROXY_TIMEOUTS.filter((name) => timeout[name] !== undefined);
  return Object.fromEntries(given.map((name) => [name, duration(timeout[name], `${what}: ${name}`)]));
}

/** The host name the suite sends: the first hostname of the first rendered HTTPRoute. */
export function gatewayHost(objects: GatewayObject[]): string {
  const route = objects.find((o) => o.kind === 'HTTPRoute');
  const hostnames = (route?.spec as { hostnames?: unknown } | undefined)?.hostnames;
  return Array.isArray(hostnames) && typeof hostnames[0] === 'string' ? hostnames[0] : '';
}

/** The routes and the policies (ObservabilityPolicies apart) among the rendered objects; anything else is refused. */
function routesAndPolicies(
  objects: GatewayObject[],
  namespace: string,
): { routeObjects: GatewayObject[]; policyObjects: GatewayObject[]; observabilityObjects: GatewayObject[] } {
  const routeObjects: GatewayObject[] = [];
  const policyObjects: GatewayObject[] = [];
  const observabilityObjects: GatewayObject[] = [];
  for (const object of objects) {
    const kind = `${object.apiVersion} ${object.kind}`;
    if (object.metadata.namespace !== undefined && object.metadata.namespace !== namespace)
      refuse(`${kind} ${object.metadata.name} in namespace ${object.metadata.namespace}`);
    if (kind === `${GATEWAY_API}/v1 HTTPRoute`) routeObjects.push(object);
    else if (kind === `${NGF_API} RateLimitPolicy` || kind === `${NGF_API} ProxySettingsPolicy`)
      policyObjects.push(object);
    else if (kind === `${NGF_API_V1ALPHA2} ObservabilityPolicy`) observabilityObjects.push(object);
    else if (kind === `networking.k8s.io/v1 Ingress`)
      refuse(`Ingress ${object.metadata.name} next to the HTTPRoutes (render with gateway.enabled)`);
    // Other Gateway API kinds, other NGF policies, other implementations' policies (Envoy Gateway).
    else if (object.apiVersion.includes('gateway')) refuse(`${kind} ${object.metadata.name}`);
  }
  return { routeObjects, policyObjects, observabilityObjects };
}

/**
 * A comment for each ObservabilityPolicy: NGF accepts one only when the NginxProxy has telemetry,
 * which the emulation refuses (nginx.config), so no otel directive is written (nor could be: no otel module).
 */
function observabilityNotes(objects: GatewayObject[], routeNames: Set<string>): string[] {
  const traced = new Set<string>();
  return objects.map((object) => {
    const what = `ObservabilityPolicy ${object.metadata.name}`;
    const spec = modelled(object.spec, `${what}: spec`, ['targetRefs', 'tracing']);
    modelled(spec.tracing ?? {}, `${what}: tracing`, ['strategy', 'ratio', 'context'], {
      spanName: 'span names',
      spanAttributes: 'span attributes',
    });
    for (const route of targets(spec, what, routeNames)) {
      // NGF settles two tracing policies on one route by age: not modelled.
      if (traced.has(route)) refuse(`two ObservabilityPolicy objects on HTTPRoute ${route}`);
      traced.add(route);
    }
    return `  # ${what}: not accepted without NginxProxy telemetry, so no otel directive.`;
  });
}

/** What the policies write into each targeted route's locations, and the rate limits' zones. */
function policyDirectives(
  policyObjects: GatewayObject[],
  namespace: string,
  routeNames: Set<string>,
): { directives: Map<string, RouteDirectives>; zones: RateLimitRule[] } {
  const directives = new Map<string, RouteDirectives>();
  const zones: RateLimitRule[] = [];
  for (const object of policyObjects) {
    // The only two kinds routesAndPolicies lets through.
    const limits = object.kind === 'RateLimitPolicy';
    const what = `${object.kind} ${object.metadata.name}`;
    const spec = modelled(object.spec, `${what}: spec`, ['targetRefs', limits ? 'rateLimit' : 'timeout'], {
      buffering: 'proxy buffering settings',
    });
    const rateLimit = limits
      ? readRateLimitPolicy(spec, what, `${namespace}_rl_${object.metadata.name}`)
      : undefined;
    const proxy = limits ? undefined : readProxySettingsPolicy(spec, what);
    if (rateLimit) zones.push(...rateLimit.rules);
    for (const route of targets(spec, what, routeNames)) {
      const current = directives.get(route) ?? {};
      // NGF settles conflicts between policies of one kind by age: not modelled.
      if ((rateLimit && current.rateLimit) || (proxy && current.proxy))
        refuse(`two ${object.kind} objects on HTTPRoute ${route}`);
      directives.set(route, { ...current, ...(rateLimit ? { rateLimit } : {}), ...(proxy ? { proxy } : {}) });
    }
  }
  return { directives, zones };
}

/** The http context before the servers: base settings, rate-limit zones and upstreams. */
function httpContext(zones: RateLimitRule[], upstreams: Map<string, string[]>, prefix: string): string[] {
  const lines: string[] = [
    '  # NGINX Gateway Fabric: base http configuration.',
    '  server_tokens off;',
    "  map $http_host $gw_api_compliant_host { '' $host; default $http_host; }",
    "  map $http_upgrade $connection_keepalive { default upgrade; '' ''; }",
    // No proxy_next_upstream: NGF writes none, so nginx's default holds (error timeout, unlimited
    // tries): an idempotent request is retried on another replica after an error or a time-out.
  ];
  for (const zone of zones)
    lines.push(`  limit_req_zone ${zone.key} zone=${zone.zone}:${zone.zoneSize} rate=${zone.rate};`);
  for (const [name, endpoints] of upstreams) {
    lines.push(`  upstream ${name} {`, '    random two least_conn;', `    zone ${name} 512k;`);
    if (endpoints.length === 0) lines.push(`    server unix:${prefix}/${NO_ENDPOINTS_SOCKET};`);
    for (const endpoint of endpoints) lines.push(`    server ${endpoint};`);
    lines.push('    keepalive 16;', '  }');
  }
  return lines;
}

/** One location of a host's server: the policies' includes, then a redirect or the proxying. */
function locationBlock(location: string, rule: PathRule, { rateLimit, proxy }: RouteDirectives): string[] {
  const lines = [`    location ${location} {`];
  // The policies' includes, in the order NGF writes them.
  if (rateLimit) {
    for (const zone of rateLimit.rules)
      lines.push(
        `      limit_req zone=${zone.zone}${zone.burst ? ` burst=${zone.burst}` : ''}${zone.noDelay ? ' nodelay' : ''}${zone.delay ? ` delay=${zone.delay}` : ''};`,
      );
    if (rateLimit.logLevel) lines.push(`      limit_req_log_level ${rateLimit.logLevel};`);
    if (rateLimit.rejectCode) lines.push(`      limit_req_status ${rateLimit.rejectCode};`);
  }
  for (const name of PROXY_TIMEOUTS)
    if (proxy?.[name]) lines.push(`      proxy_${name}_timeout ${proxy[name]};`);
  if (rule.redirect) {
    // servers_template.go: rewrite, then return (both in nginx's rewrite phase, before
    // limit_req's preaccess phase: a redirect is answered without being counted).
    return [
      ...lines,
      `      rewrite ^ ${rule.redirect.path};`,
      `      return ${rule.redirect.code} "$scheme://$host:${rule.redirect.port}$uri$is_args$args";`,
      '      proxy_http_version 1.1;',
      '    }',
    ];
  }
  const upstream = rule.upstream ?? refuse(`location ${location} has neither backend nor redirect`);
  const set = rule.setHeaders ?? [];
  const base = [
    ['Host', '$gw_api_compliant_host'],
    ['X-Forwarded-For', '$proxy_add_x_forwarded_for'],
    ['X-Real-IP', '$remote_addr'],
    ['X-Forwarded-Proto', '$scheme'],
    ['X-Forwarded-Host', '$host'],
    ['X-Forwarded-Port', '$server_port'],
  ].filter(([name]) => !set.some((header) => header.name === name));
  return [
    ...lines,
    '      proxy_http_version 1.1;',
    // The route's own headers first, then the base ones it did not replace (generateProxySetHeaders).
    ...[...set.map((header) => [header.name, header.value]), ...base].map(
      ([name, value]) => `      proxy_set_header ${name ?? ''} "${value ?? ''}";`,
    ),
    '      proxy_set_header Upgrade "$http_upgrade";',
    '      proxy_set_header Connection "$connection_keepalive";',
    // No URI part: nginx passes the request URI as the client sent it.
    `      proxy_pass http://${upstream};`,
    '    }',
  ];
}

/**
 * The nginx.conf NGINX Gateway Fabric would write for these objects, attached to `gateway`
 * (k8s-tests/gateway.yaml), with its Helm values; throws on anything it does not model.
 */
export function translateGateway(
  objects: GatewayObject[],
  gatewayObject: GatewayObject,
  fabricValues: NginxGatewayFabricValues,
  settings: NginxSettings,
): string {
  const { gatewayClassName } = readFabricValues(fabricValues);
  const gateway = readGateway(gatewayObject, gatewayClassName);
  const namespace = settings.namespace;
  const { routeObjects, policyObjects, observabilityObjects } = routesAndPolicies(objects, namespace);

  const upstreams = new Map<string, string[]>();
  const routes = routeObjects.map((object) =>
    readRoute(object, namespace, gateway, settings.endpoints, upstreams),
  );
  if (routes.length === 0) refuse('no HTTPRoute');
  const routeNames = new Set(routes.map((r) => r.name));
  const { directives, zones } = policyDirectives(policyObjects, namespace, routeNames);

  // One server per host name: the locations of every route on that host.
  // NGF merges two routes' rules for one location or prefers one by route age: not modelled.
  const servers = new HostLocations<PathRule>(refuse, (rule) => rule.route);
  for (const route of routes)
    for (const host of route.hosts) {
      servers.host(host);
      for (const rule of route.rules)
        for (const location of rule.locations) servers.add(host, location, rule);
    }

  const lines = [
    ...httpContext(zones, upstreams, settings.prefix),
    ...observabilityNotes(observabilityObjects, routeNames),
  ];
  lines.push(...defaultServer(settings, ['    default_type text/html;', '    return 404;']));
  for (const [host, locations] of servers.byHost) {
    lines.push(...hostServer(settings, host));
    for (const [location, rule] of locations)
      lines.push(...locationBlock(location, rule, directives.get(rule.route) ?? {}));
    // servers.go: without a rule for "/", NGF answers "/" itself with 404.
    if (![...locations.values()].some((rule) => rule.path === '/'))
      lines.push('    location = / {', '      return 404;', '    }');
    lines.push('  }');
  }
  lines.push(
    '  server {',
    `    listen unix:${settings.prefix}/${NO_ENDPOINTS_SOCKET};`,
    '    access_log off;',
    '    return 503;',
    '  }',
  );
  return emulatedConf('k8s-tests/local/gateway-config.ts', settings, lines);
}
