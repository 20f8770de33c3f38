import {
  isSpanContextValid,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Tracer,
} from '@opentelemetry/api';
import type { RequestHandler } from 'express';

/**
 * The spans this service makes itself, with OpenTelemetry's API and no instrumentation package: the
 * request, its route, the pool wait and each statement. The API is all that is imported here, which
 * is small: the SDK (tracing-sdk.ts) is loaded only when a collector is configured, and until it
 * calls tracingStarted every helper below costs one comparison.
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

/** The database attributes of every statement span (OpenTelemetry's database conventions). */
const DB_SYSTEM = { 'db.system.name': 'postgresql' } as const;

/** A statement span's attributes: the database's, and its name as the query summary. */
const statementAttributes = (name: string): Attributes => ({ ...DB_SYSTEM, 'db.query.summary': name });

/** The tracer when the active span is a sampled request's (spans are made under one only), else undefined. */
const recordingTracer = (): Tracer | undefined =>
  started !== undefined && trace.getActiveSpan()?.isRecording() === true ? started.tracer : undefined;

/**
 * Runs `work` in a span of its own, a child of the active one. Outside a sampled span (a request
 * not traced, a background job, the migrations) it runs without one: a span there would start a
 * trace of its own or be dropped with its parent anyway.
 */
function inSpan<T>(name: string, kind: SpanKind, attributes: Attributes, work: () => Promise<T>): Promise<T> {
  const tracer = recordingTracer();
  return tracer ? spanOf(tracer, name, kind, attributes, work) : work();
}

/** `work` in a span of `tracer`'s, a child of the active one, marked an error if it throws. */
function spanOf<T>(
  tracer: Tracer,
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  work: () => Promise<T>,
): Promise<T> {
  return tracer.startActiveSpan(name, { kind, attributes }, async (span) => {
    try {
      return await work();
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
 * The wait for a pooled connection. Opening one is part of the wait: the statement knex sends on a
 * new connection (its version check) has no span of its own.
 */
export function tracedPoolWait<T>(work: () => Promise<T>): Promise<T> {
  return inSpan('db pool wait', SpanKind.INTERNAL, DB_SYSTEM, work);
}

/**
 * One statement, named by its prepared statement's name (statements.ts), never with its values:
 * the name is the query summary, which the conventions make the span's name.
 */
export function tracedStatement<T>(name: string, work: () => Promise<T>): Promise<T> {
  return inSpan(name, SpanKind.CLIENT, statementAttributes(name), work);
}

/**
 * A statement knex builds and sends itself (an insert, a transaction's BEGIN and COMMIT), named as
 * the conventions' query summary: its operation and first table, `INSERT posts`; a WITH whose first
 * part changes rows is named by that change. knex binds every value as a parameter, so neither word
 * can be one.
 */
function querySummary(sql: string): string {
  const change = /^\s*with\b[^(]*\(\s*(insert|update|delete)\b/i.exec(sql)?.[1];
  const operation = (change ?? /^\s*(\w+)/.exec(sql)?.[1])?.toUpperCase() ?? 'QUERY';
  const table = /\b(?:into|update|from)\s+"?([\w.]+)/i.exec(sql)?.[1];
  return table === undefined ? operation : `${operation} ${table}`;
}

/** A statement knex sends itself, in a span named by its summary; the SQL is read only when sampled. */
export function tracedQuery<T>(sql: string, work: () => Promise<T>): Promise<T> {
  const tracer = recordingTracer();
  if (!tracer) return work();
  const name = querySummary(sql);
  return spanOf(tracer, name, SpanKind.CLIENT, statementAttributes(name), work);
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
