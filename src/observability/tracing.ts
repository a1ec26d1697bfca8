// Optional OpenTelemetry tracing (OTEL_TRACING=true). Nothing here is loaded
// unless it is on: the SDK and the exporter are imported dynamically. A span per
// GraphQL operation (made the active context while it executes, a child of an
// incoming W3C traceparent when there is one) and, under it, a CLIENT span per
// upstream call, built from the call record when the call ends.
import type { Plugin } from 'graphql-yoga';
import type { Config } from '../config.js';
import type { UpstreamCallRecord } from '../upstream/http.js';
import { OperationNames } from './operation-names.js';

export interface Tracing {
  plugin: Plugin;
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
  const names = new OperationNames();
  const spans = new WeakMap<object, import('@opentelemetry/api').Span>();

  const headersOf = (context: { req?: unknown; request?: unknown }): Record<string, unknown> | undefined => {
    const req = context.req as { headers?: Record<string, unknown> } | undefined;
    if (req?.headers) return req.headers;
    const request = context.request as Request | undefined;
    return request?.headers ? Object.fromEntries(request.headers) : undefined;
  };

  const wrap = (context: object, run: () => unknown) => {
    const headers = headersOf(context);
    const parent = headers ? api.propagation.extract(api.ROOT_CONTEXT, headers) : api.context.active();
    const span = tracer.startSpan('graphql.operation', { kind: api.SpanKind.SERVER }, parent);
    spans.set(context, span);
    return api.context.with(api.trace.setSpan(parent, span), run);
  };

  const name = (context: unknown, document: import('graphql').DocumentNode, operationName: string | null | undefined) => {
    const span = spans.get(context as object);
    if (!span) return undefined;
    const label = names.label(document, operationName);
    span.updateName(`${label.type} ${label.raw ?? 'anonymous'}`);
    span.setAttributes({ 'graphql.operation.type': label.type, 'graphql.operation.name': label.raw ?? '' });
    return span;
  };

  const plugin: Plugin = {
    instrumentation: {
      execute: ({ context }, wrapped) => wrap(context, wrapped) as ReturnType<typeof wrapped>,
      subscribe: ({ context }, wrapped) => wrap(context, wrapped) as ReturnType<typeof wrapped>,
    },
    onExecute({ args }) {
      const span = name(args.contextValue, args.document, args.operationName);
      if (!span) return;
      return {
        onExecuteDone({ result }) {
          const errors = (result as { errors?: readonly unknown[] }).errors;
          if (errors?.length) span.setStatus({ code: api.SpanStatusCode.ERROR, message: `${errors.length} error(s)` });
          span.end();
        },
      };
    },
    onSubscribe({ args }) {
      const span = name(args.contextValue, args.document, args.operationName);
      if (!span) return;
      // The span covers setting the subscription up, not its lifetime.
      return { onSubscribeResult: () => void span.end() };
    },
  };

  return {
    plugin,
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
