import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import {
  context,
  diag,
  DiagLogLevel,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  trace,
  type Context,
  type Tracer,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { getRPCMetadata, RPCType, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
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
import { ATTR_HTTP_ROUTE } from '@opentelemetry/semantic-conventions';
import type { Request, RequestHandler } from 'express';
import type { Logger } from './logger';
import type { SamplerName, Settings } from './settings';
import { tracingStarted } from './tracing';

/** What the OTEL_* settings hold. */
export type TracingSettings = Settings['tracing'];

/** The sampler OTEL_TRACES_SAMPLER names, as OpenTelemetry's environment specification defines each. */
export function samplerFor(name: SamplerName, ratio: number): Sampler {
  const root = (base: string): Sampler => {
    if (base === 'always_on') return new AlwaysOnSampler();
    if (base === 'always_off') return new AlwaysOffSampler();
    return new TraceIdRatioBasedSampler(ratio);
  };
  return name.startsWith('parentbased_')
    ? new ParentBasedSampler({ root: root(name.slice('parentbased_'.length)) })
    : root(name);
}

/** Probes and scrapes come every few seconds from the kubelet and Prometheus: no trace of them. */
const probeOrScrape = (req: IncomingMessage): boolean => {
  const url = req.url ?? '';
  return url.startsWith('/healthz') || url.startsWith('/metrics');
};

/**
 * The configured sampler's answer for a request, asked at the door, before the http
 * instrumentation does any work for it: a request it declines is left alone entirely (no span, no
 * attributes, nothing for the driver's instrumentation), which is what keeps a low ratio cheap.
 * The caller's `traceparent` is the parent it decides on; a new root is decided on a throwaway
 * trace id, which gives the ratio's odds as well as the span's own id would.
 */
function sampledAtTheDoor(sampler: Sampler): (req: IncomingMessage) => boolean {
  const ids = new RandomIdGenerator();
  return (req) => {
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const traceId = trace.getSpanContext(parent)?.traceId ?? ids.generateTraceId();
    const { decision } = sampler.shouldSample(parent, traceId, 'request', SpanKind.SERVER, {}, []);
    return decision === SamplingDecision.RECORD_AND_SAMPLED;
  };
}

/**
 * Binds an emitter's listeners to a context only where that context holds a span. The http
 * instrumentation binds each request and response, the declined ones too, which would wrap every
 * listener and every event of a request no span is made for.
 */
class SpanContextManager extends AsyncLocalStorageContextManager {
  override bind<T>(target: Context, bound: T): T {
    if (bound instanceof EventEmitter && trace.getSpan(target) === undefined) return bound;
    return super.bind(target, bound);
  }
}

/**
 * Starts OpenTelemetry's SDK. Must run before express, pg and http are first loaded by the
 * app (main.ts loads them after it), as the instrumentations patch them when they are loaded.
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
  const exporter =
    settings.protocol === 'http/json' ? new JsonExporter({ url }) : new ProtobufExporter({ url });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      ...settings.resourceAttributes,
      'service.name': settings.serviceName,
    }),
    // The door (sampledAtTheDoor) has decided: every span that starts is in a request it took.
    sampler: new AlwaysOnSampler(),
    spanProcessors: [new BatchSpanProcessor({ exporter })],
  });
  context.setGlobalContextManager(new SpanContextManager().enable());
  // W3C Trace Context only: the proxies in front (ingress-nginx, NGINX Gateway Fabric) send it.
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const sampled = sampledAtTheDoor(samplerFor(settings.sampler, settings.samplerArg));
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (req) => probeOrScrape(req) || !sampled(req),
        // The service calls nothing over HTTP but the collector, whose exporter traces nothing.
        disableOutgoingRequestInstrumentation: true,
      }),
      // Statements sent through knex (a transaction's) outside the service's own statement spans;
      // nothing outside a request: no trace for each connection or migration at start-up.
      new PgInstrumentation({ requireParentSpan: true, ignoreConnectSpans: true }),
    ],
  });
  const tracer = trace.getTracer('social-posts');
  tracingStarted({
    tracer,
    routeSpans: routeSpans(tracer),
    flush: () => provider.shutdown(),
  });
}

/** The route a request matched as the app wrote it (`/posts/:id`), once a route took it. */
function matchedRoute(req: Request): string | undefined {
  const path = (req.route as { path?: unknown } | undefined)?.path;
  return typeof path === 'string' ? `${req.baseUrl}${path}` : undefined;
}

/**
 * A span for each sampled request's route (`route /posts/:id`, its http.route), around all the app
 * does with it, and the route on the request's span too. In place of the express instrumentation,
 * which wraps every middleware and handler of every request, sampled or not: most of tracing's
 * cost at a low sampling ratio.
 */
function routeSpans(tracer: Tracer): RequestHandler {
  return (req, res, next) => {
    if (trace.getActiveSpan()?.isRecording() !== true) {
      next();
      return;
    }
    const metadata = getRPCMetadata(context.active());
    const span = tracer.startSpan('route');
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const route = matchedRoute(req);
      if (route !== undefined) {
        span.setAttribute(ATTR_HTTP_ROUTE, route);
        span.updateName(`route ${route}`);
        // The http instrumentation names the request's span from it when the answer ends.
        if (metadata?.type === RPCType.HTTP) metadata.route = route;
      }
      span.end();
    };
    // Every answer's head goes through writeHead (Node calls it for an implicit head too).
    const writeHead = res.writeHead.bind(res);
    res.writeHead = ((...args: Parameters<typeof writeHead>) => {
      end();
      return writeHead(...args);
    }) as typeof res.writeHead;
    res.once('close', end);
    context.with(trace.setSpan(context.active(), span), next);
  };
}
