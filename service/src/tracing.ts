import {
  context,
  isSpanContextValid,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Tracer,
} from '@opentelemetry/api';
import type { RequestHandler } from 'express';

/**
 * The spans this service makes itself (the request, its route, the pool wait, each statement),
 * beside the pg instrumentation's. Only OpenTelemetry's API is imported here, which is small: the
 * SDK (tracing-sdk.ts) is loaded only when a collector is configured, and until it calls
 * tracingStarted every helper below costs one comparison.
 */
interface Started {
  tracer: Tracer;
  /** The middleware that makes each sampled request's own span (tracing-sdk.ts). */
  requestSpans: RequestHandler;
  /** The middleware that makes each sampled request's route span (tracing-sdk.ts). */
  routeSpans: RequestHandler;
  flush: () => Promise<void>;
}

let started: Started | undefined;

/** Called once by tracing-sdk.ts, after the SDK is registered. */
export function tracingStarted(sdk: Started): void {
  started = sdk;
}

/** The app's first middleware, for request spans: while tracing is off, one comparison per request. */
export const requestSpans: RequestHandler = (req, res, next) => {
  if (started) started.requestSpans(req, res, next);
  else next();
};

/** The app's middleware for route spans: while tracing is off, one comparison per request. */
export const routeSpans: RequestHandler = (req, res, next) => {
  if (started) started.routeSpans(req, res, next);
  else next();
};

/** Sends the spans not yet exported; at shutdown, after the last request. */
export async function flushTraces(): Promise<void> {
  await started?.flush();
}

/**
 * A context in which the pg instrumentation makes no span, as it makes them only under one: the
 * statement's own span stands for it. It stands aside at once there, where in a context that only
 * suppresses tracing it would still build each statement's attributes for a span that is dropped.
 */
const withoutDriverSpans = (): Context => trace.deleteSpan(context.active());

/** The database attributes of every statement span (OpenTelemetry's database conventions). */
const DB_SYSTEM = { 'db.system.name': 'postgresql' } as const;

/**
 * Runs `work` in a span of its own, a child of the active one. Outside a sampled span (a request
 * not traced, a background job) it runs without spans, the driver's included: a span there would
 * start a trace of its own or be dropped with its parent anyway.
 */
function inSpan<T>(
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  work: () => Promise<T>,
  suppressDriver = false,
): Promise<T> {
  if (!started) return work();
  const { tracer } = started;
  // A request the sampler declined has no span at all, and the driver's instrumentation stands aside.
  if (trace.getActiveSpan()?.isRecording() !== true) return work();
  return tracer.startActiveSpan(name, { kind, attributes }, async (span) => {
    try {
      return await (suppressDriver ? context.with(withoutDriverSpans(), work) : work());
    } catch (error) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: error instanceof Error ? error.message : undefined,
      });
      throw error;
    } finally {
      span.end();
    }
  });
}

/**
 * The wait for a pooled connection. Opening one is part of the wait: the statements the driver and
 * knex send on a new connection (its version check) make no spans of their own.
 */
export function tracedPoolWait<T>(work: () => Promise<T>): Promise<T> {
  return inSpan('db pool wait', SpanKind.INTERNAL, DB_SYSTEM, work, true);
}

/**
 * One statement, named by its prepared statement's name (statements.ts), never with its values:
 * the name is the query summary, which the conventions make the span's name.
 */
export function tracedStatement<T>(name: string, work: () => Promise<T>): Promise<T> {
  return inSpan(name, SpanKind.CLIENT, { ...DB_SYSTEM, 'db.query.summary': name }, work, true);
}

/**
 * pino's mixin while tracing is on: each line written inside a span carries its trace and span id,
 * so a trace leads to its request's log lines and back. A request the sampler declined has no span,
 * so its lines carry none: its request id ties them to the proxy's log.
 */
export function traceIds(): { trace_id?: string; span_id?: string } {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const ids = span.spanContext();
  return isSpanContextValid(ids) ? { trace_id: ids.traceId, span_id: ids.spanId } : {};
}
