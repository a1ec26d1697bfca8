// Optional OpenTelemetry tracing (OTEL_TRACING=true). Nothing here is loaded
// unless it is on: the SDK and the exporter are imported dynamically. A span per
// GraphQL operation (made the active context while it executes, a child of an
// incoming W3C traceparent when there is one) and, under it, a CLIENT span per
// upstream call, built from the call record when the call ends.
import type { Config } from '../config.js';
import type { UpstreamCallRecord } from '../upstream/http.js';
import type { OperationLabel } from './operation-names.js';

/** The pipeline's OperationObserver, by shape (observability does not import the pipeline). */
export interface OperationObserverLike {
  start(label: OperationLabel, request: object): { around<T>(run: () => T): T; done(outcome: unknown): void } | undefined;
}

export interface Tracing {
  /** A span per operation the pipeline runs. */
  observer: OperationObserverLike;
  upstreamCall(record: UpstreamCallRecord): void;
  shutdown(): Promise<void>;
}

/** For tests: a span exporter to use instead of OTLP over HTTP. */
export type SpanExporterLike = import('@opentelemetry/sdk-trace-node').SpanExporter;

export async function startTracing(config: Config['tracing'], exporter?: SpanExporterLike): Promise<Tracing> {
  const api = await import('@opentelemetry/api');
  const { NodeTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-node');
  const { resourceFromAttributes } = await import('@opentelemetry/resources');
  const spanExporter = exporter ?? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter({ url: config.tracesUrl });

  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': config.serviceName }),
    spanProcessors: [new BatchSpanProcessor(spanExporter)],
  });
  // Installs the AsyncLocalStorage context manager and the W3C propagator.
  provider.register();
  const tracer = provider.getTracer('delivery-graph');
  type Watched = { req?: { headers?: Record<string, unknown> }; headers?: Record<string, unknown> };

  const observer: OperationObserverLike = {
    start(label, request: Watched) {
      const headers = request.req?.headers ?? request.headers;
      const parent = headers ? api.propagation.extract(api.ROOT_CONTEXT, headers) : api.context.active();
      const span = tracer.startSpan(`${label.type} ${label.raw ?? 'anonymous'}`, { kind: api.SpanKind.SERVER }, parent);
      span.setAttributes({ 'graphql.operation.type': label.type, 'graphql.operation.name': label.raw ?? '' });
      const active = api.trace.setSpan(parent, span);
      return {
        around: <T>(run: () => T): T => api.context.with(active, run),
        // A subscription's span covers setting it up, not its lifetime.
        done(outcome: unknown) {
          const errors = (outcome as { errors?: readonly unknown[] }).errors;
          if (errors?.length) span.setStatus({ code: api.SpanStatusCode.ERROR, message: `${errors.length} error(s)` });
          span.end();
        },
      };
    },
  };

  return {
    observer,
    upstreamCall(record) {
      // Only calls made for an operation; readiness probes and the like are not traced.
      const parent = api.context.active();
      if (!api.trace.getSpan(parent)) return;
      const end = performance.timeOrigin + performance.now();
      const span = tracer.startSpan(
        `${record.method} ${record.route}`,
        {
          kind: api.SpanKind.CLIENT,
          startTime: end - record.durationMs,
          attributes: {
            'http.request.method': record.method,
            'url.template': record.route,
            'delivery_graph.upstream.group': record.group,
            'delivery_graph.upstream.outcome': record.outcome,
            'delivery_graph.upstream.attempts': record.attempts,
            ...(record.status !== undefined ? { 'http.response.status_code': record.status } : {}),
          },
        },
        parent,
      );
      if (record.outcome !== 'ok') span.setStatus({ code: api.SpanStatusCode.ERROR, message: record.outcome });
      span.end(end);
    },
    async shutdown() {
      await provider.shutdown();
      api.trace.disable();
      api.context.disable();
      api.propagation.disable();
    },
  };
}
