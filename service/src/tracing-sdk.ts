import type { IncomingMessage } from 'node:http';
import {
  context,
  createContextKey,
  diag,
  DiagLogLevel,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Tracer,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  RandomIdGenerator,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import {
  ATTR_CLIENT_ADDRESS,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_NETWORK_PEER_ADDRESS,
  ATTR_NETWORK_PEER_PORT,
  ATTR_NETWORK_PROTOCOL_VERSION,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
  ATTR_USER_AGENT_ORIGINAL,
} from '@opentelemetry/semantic-conventions';
import type { Request, RequestHandler, Response } from 'express';
import { settledStatus } from './http/pipelining';
import type { Logger } from './logger';
import type { SamplerName, Settings } from './settings';
import { tracingStarted } from './tracing';

/** What the OTEL_* settings hold. */
export type TracingSettings = Settings['tracing'];

/**
 * The most of an attribute's value a span keeps: the caller's user agent and path could otherwise
 * be as long as the request's headers allow, in each of the spans the export queue holds.
 */
const ATTRIBUTE_VALUE_LENGTH = 1024;

/** The sampler OTEL_TRACES_SAMPLER names, as OpenTelemetry's environment specification defines each. */
function samplerFor(name: SamplerName, ratio: number): Sampler {
  const root = (base: string): Sampler => {
    if (base === 'always_on') return new AlwaysOnSampler();
    if (base === 'always_off') return new AlwaysOffSampler();
    return new TraceIdRatioBasedSampler(ratio);
  };
  return name.startsWith('parentbased_')
    ? new ParentBasedSampler({ root: root(name.slice('parentbased_'.length)) })
    : root(name);
}

/**
 * Probes come every few seconds from the kubelet: no trace of them. Scrapes go to the metrics
 * listener, which is not the app's, so no span is ever made for them.
 */
const probe = (req: IncomingMessage): boolean => (req.url ?? '').startsWith('/healthz');

/**
 * The configured sampler's answer for a request, asked at the door, before any span work: the
 * caller's context (its `traceparent`) when the request is to be traced, undefined when it is not,
 * which then costs nothing more. A new root is decided on a throwaway trace id, which gives the
 * ratio's odds as well as the span's own id would.
 */
function sampledAtTheDoor(sampler: Sampler): (req: IncomingMessage) => Context | undefined {
  const ids = new RandomIdGenerator();
  return (req) => {
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const traceId = trace.getSpanContext(parent)?.traceId ?? ids.generateTraceId();
    const { decision } = sampler.shouldSample(parent, traceId, 'request', SpanKind.SERVER, {}, []);
    return decision === SamplingDecision.RECORD_AND_SAMPLED ? parent : undefined;
  };
}

/**
 * Starts OpenTelemetry's SDK: the exporter, the sampler at the door, and the middleware that make the
 * request's and the route's spans (the statements' are tracing.ts's). Nothing is patched.
 * @public main.ts loads it with require(), which knip does not follow.
 */
export function startTracing(settings: TracingSettings, logger: Logger): void {
  const { endpoint } = settings;
  if (!endpoint) return;
  // The exporter's failures (a collector down) go to the log, not to stderr unformatted.
  diag.setLogger(
    {
      error: (message, ...args) => {
        logger.warn({ source: 'opentelemetry', args }, message);
      },
      warn: (message, ...args) => {
        logger.warn({ source: 'opentelemetry', args }, message);
      },
      info: () => undefined,
      debug: () => undefined,
      verbose: () => undefined,
    },
    DiagLogLevel.WARN,
  );
  const url = `${endpoint.replace(/\/+$/, '')}/v1/traces`;
  const timeoutMillis = settings.exportTimeoutMs;
  const exporter =
    settings.protocol === 'http/json'
      ? new JsonExporter({ url, timeoutMillis })
      : new ProtobufExporter({ url, timeoutMillis });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      ...settings.resourceAttributes,
      'service.name': settings.serviceName,
    }),
    // The door (sampledAtTheDoor) has decided: every span that starts is in a request it took.
    sampler: new AlwaysOnSampler(),
    spanLimits: { attributeValueLengthLimit: ATTRIBUTE_VALUE_LENGTH },
    // The exporter's timeout only fires while no byte moves: the batch's own bound holds a collector
    // that takes a batch slowly to the same time.
    spanProcessors: [
      new BatchSpanProcessor({
        exporter,
        scheduledDelayMillis: settings.exportDelayMs,
        exportTimeoutMillis: timeoutMillis,
      }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  // W3C Trace Context only: the proxies in front (ingress-nginx, NGINX Gateway Fabric) send it.
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const tracer = trace.getTracer('social-posts');
  tracingStarted({
    tracer,
    requestSpans: requestSpans(tracer, sampledAtTheDoor(samplerFor(settings.sampler, settings.samplerArg))),
    routeSpans: routeSpans(tracer),
    // The batches left and those already on their way, bounded as a whole: the shutdown's time is
    // the pod's grace.
    flush: () =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(new Error('the collector did not take them within OTEL_EXPORTER_OTLP_TIMEOUT'));
        }, timeoutMillis);
        void provider
          .shutdown()
          .then(resolve, reject)
          .finally(() => {
            clearTimeout(timer);
          });
      }),
  });
}

/**
 * The route a request matched as the app wrote it (`/posts/:id`), once a route took it; of a route
 * written with several spellings (`['/posts/', '/posts']`), the first, which the contract names.
 */
function matchedRoute(req: Request): string | undefined {
  const written = (req.route as { path?: unknown } | undefined)?.path;
  const path: unknown = Array.isArray(written) ? written[0] : written;
  return typeof path === 'string' ? `${req.baseUrl}${path}` : undefined;
}

/** The request's attributes by OpenTelemetry's HTTP server conventions (the query string left out). */
function requestAttributes(req: Request): Attributes {
  const attributes: Attributes = {
    [ATTR_HTTP_REQUEST_METHOD]: req.method,
    [ATTR_URL_PATH]: req.path,
    [ATTR_URL_SCHEME]: req.protocol,
    [ATTR_SERVER_ADDRESS]: req.hostname,
    [ATTR_NETWORK_PROTOCOL_VERSION]: req.httpVersion,
    [ATTR_NETWORK_PEER_ADDRESS]: req.socket.remoteAddress,
    [ATTR_NETWORK_PEER_PORT]: req.socket.remotePort,
  };
  // Through the trusted proxies only (the app's trust proxy), as the request log records it.
  if (req.ip !== undefined) attributes[ATTR_CLIENT_ADDRESS] = req.ip;
  // The port the caller asked for, from Host (or the trusted proxies' X-Forwarded-Host). Express
  // gives neither name nor port for a request without Host, which HTTP/1.0 may send.
  const host = req.host as string | undefined;
  const port = Number(host?.slice(req.hostname.length + 1));
  if (Number.isInteger(port) && port > 0) attributes[ATTR_SERVER_PORT] = port;
  const agent = req.headers['user-agent'];
  if (agent !== undefined) attributes[ATTR_USER_AGENT_ORIGINAL] = agent;
  return attributes;
}

/** Spans of one sampled request: its own (SERVER) and, once routing starts, its route's. */
interface RequestSpans {
  request: ReturnType<Tracer['startSpan']>;
  route?: ReturnType<Tracer['startSpan']>;
}
const REQUEST_SPANS = createContextKey('social-posts request spans');

/** Both spans end when the connection is done with the answer: the route's, then the request's. */
function endRequestSpans(spans: RequestSpans, req: Request, res: Response): void {
  const route = matchedRoute(req);
  // As the request log and the metrics: 499 when the client left before the answer was sent in full.
  const status = settledStatus(res);
  if (spans.route) {
    if (route !== undefined) {
      spans.route.setAttribute(ATTR_HTTP_ROUTE, route);
      spans.route.updateName(`route ${route}`);
    }
    spans.route.end();
  }
  const { request } = spans;
  request.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
  if (route !== undefined) {
    request.setAttribute(ATTR_HTTP_ROUTE, route);
    request.updateName(`${req.method} ${route}`);
  }
  // A server's span is an error for a 5xx only: a 4xx is the caller's, by the conventions.
  if (status >= 500) {
    request.setAttribute(ATTR_ERROR_TYPE, String(status));
    request.setStatus({ code: SpanStatusCode.ERROR });
  }
  request.end();
}

/**
 * The span of each request the sampler takes at the door, a child of the caller's `traceparent`,
 * made here rather than by the http instrumentation, which wraps every request's emitter and every
 * listener on its answer: most of what a sampled request cost, and the whole of an unsampled one's.
 */
function requestSpans(
  tracer: Tracer,
  sampled: (req: IncomingMessage) => Context | undefined,
): RequestHandler {
  return (req, res, next) => {
    const parent = probe(req) ? undefined : sampled(req);
    if (parent === undefined) {
      next();
      return;
    }
    const spans: RequestSpans = {
      request: tracer.startSpan(
        req.method,
        { kind: SpanKind.SERVER, attributes: requestAttributes(req) },
        parent,
      ),
    };
    res.once('close', () => {
      endRequestSpans(spans, req, res);
    });
    // The body parsers keep the context across the body's arrival (AsyncResource.bind): no
    // listener of the request or its answer needs wrapping.
    context.with(trace.setSpan(parent, spans.request).setValue(REQUEST_SPANS, spans), next);
  };
}

/**
 * A span for each sampled request's route (`route /posts/:id`, its http.route), around all the app
 * does with it, in place of the express instrumentation, which wraps every middleware and handler of
 * every request, sampled or not. It ends with the request's span (requestSpans).
 */
function routeSpans(tracer: Tracer): RequestHandler {
  return (_req, _res, next) => {
    const spans = context.active().getValue(REQUEST_SPANS) as RequestSpans | undefined;
    if (spans === undefined) {
      next();
      return;
    }
    spans.route = tracer.startSpan('route');
    context.with(trace.setSpan(context.active(), spans.route), next);
  };
}
