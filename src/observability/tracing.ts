// OpenTelemetry tracing, configured as its users expect: the standard OTEL_*
// variables (config.ts, tracingConfig) and the OpenTelemetry instrumentations
// for Node's http server and for undici, whose spans carry the standard
// attributes. Nothing here is loaded unless tracing is on: the SDK, the exporter
// and the instrumentations are imported dynamically.
//
// A trace of a read: the HTTP server span (instrumentation-http, `POST`), under
// it a span per GraphQL operation (ours: `query Read`, with the semantic
// conventions' graphql.operation.* attributes; no maintained GraphQL
// instrumentation sees it, as operations run on graphql-jit from ESM), and under
// that a CLIENT span per upstream request (instrumentation-undici, one per
// attempt). An operation over graphql-ws has no HTTP span: its span is the root,
// a child of a `traceparent` in the connection's headers when there is one.
import { createRequire } from 'node:module';
import type { Config } from '../config.js';
import type { OperationLabel } from './operation-names.js';

/** The pipeline's OperationObserver, by shape (observability does not import the pipeline). */
export interface OperationObserverLike {
  start(
    label: OperationLabel,
    request: object,
  ): { around<T>(run: () => T): T; done(outcome: unknown): void } | undefined;
}

export interface Tracing {
  /** A span per operation the pipeline runs. */
  observer: OperationObserverLike;
  shutdown(): Promise<void>;
}

/** For tests: a span exporter to use instead of the configured one. */
export type SpanExporterLike = import('@opentelemetry/sdk-trace-node').SpanExporter;

/** Requests that are not worth a trace: probes and scrapes, many a minute. */
const UNTRACED_PATHS = new Set(['/health', '/ready', '/metrics']);

export async function startTracing(config: Config['tracing'], exporter?: SpanExporterLike): Promise<Tracing> {
  const api = await import('@opentelemetry/api');
  const sdk = await import('@opentelemetry/sdk-trace-node');
  const { resourceFromAttributes } = await import('@opentelemetry/resources');
  const { registerInstrumentations } = await import('@opentelemetry/instrumentation');
  const { HttpInstrumentation } = await import('@opentelemetry/instrumentation-http');
  const { UndiciInstrumentation } = await import('@opentelemetry/instrumentation-undici');
  const spanExporter =
    exporter ??
    (config.exporter === 'console'
      ? new sdk.ConsoleSpanExporter()
      : new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter({
          url: config.tracesUrl,
          headers: { ...config.headers },
        }));

  const ratio = new sdk.TraceIdRatioBasedSampler(config.sampler.ratio);
  const sampler = {
    always_on: new sdk.AlwaysOnSampler(),
    always_off: new sdk.AlwaysOffSampler(),
    traceidratio: ratio,
    parentbased_always_on: new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() }),
    parentbased_always_off: new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() }),
    parentbased_traceidratio: new sdk.ParentBasedSampler({ root: ratio }),
  }[config.sampler.name];
  const provider = new sdk.NodeTracerProvider({
    resource: resourceFromAttributes({ ...config.resourceAttributes, 'service.name': config.serviceName }),
    sampler,
    spanProcessors: [new sdk.BatchSpanProcessor(spanExporter)],
  });
  // Installs the AsyncLocalStorage context manager and the W3C trace-context and baggage propagators.
  provider.register();
  const stopInstrumenting = registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (request) => UNTRACED_PATHS.has((request.url ?? '').split('?', 1)[0]!),
        // The facade makes no outgoing requests with node:http (the upstream is reached through undici).
        disableOutgoingRequestInstrumentation: true,
      }),
      new UndiciInstrumentation(),
    ],
  });
  // node:http was loaded (through ESM imports) before the instrumentation: requiring it again lets
  // the instrumentation patch it; the server prototype it patches is the one every server shares.
  createRequire(import.meta.url)('node:http');
  const tracer = provider.getTracer('delivery-graph');
  type Watched = { req?: { headers?: Record<string, unknown> }; headers?: Record<string, unknown> };

  const observer: OperationObserverLike = {
    start(label, request: Watched) {
      // Under the HTTP server span when there is one; otherwise (graphql-ws) a root, or a child of the connection's
      // traceparent.
      const active = api.context.active();
      const underHttp = api.trace.getSpan(active) !== undefined;
      const headers = request.req?.headers ?? request.headers;
      const parent = underHttp || !headers ? active : api.propagation.extract(api.ROOT_CONTEXT, headers);
      const span = tracer.startSpan(
        `${label.type} ${label.raw ?? 'anonymous'}`,
        { kind: underHttp ? api.SpanKind.INTERNAL : api.SpanKind.SERVER },
        parent,
      );
      span.setAttributes({
        'graphql.operation.type': label.type,
        ...(label.raw ? { 'graphql.operation.name': label.raw } : {}),
      });
      const context = api.trace.setSpan(parent, span);
      return {
        around: <T>(run: () => T): T => api.context.with(context, run),
        // A subscription's span covers setting it up, not its lifetime.
        done(outcome: unknown) {
          const errors = (outcome as { errors?: ReadonlyArray<{ extensions?: { code?: unknown } }> }).errors;
          if (errors?.length) {
            span.setAttribute('error.type', String(errors[0]!.extensions?.code ?? 'GRAPHQL_ERROR'));
            span.setStatus({ code: api.SpanStatusCode.ERROR, message: `${errors.length} error(s)` });
          }
          span.end();
        },
      };
    },
  };

  return {
    observer,
    async shutdown() {
      stopInstrumenting();
      await provider.shutdown();
      api.trace.disable();
      api.context.disable();
      api.propagation.disable();
    },
  };
}
