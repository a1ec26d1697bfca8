// Observability: the log's level and format, who may read /metrics and where, and OpenTelemetry tracing from the
// standard OTEL_* variables.
import { ConfigError, extraPort, httpUrlOf, oneOf, text, type Env } from './parse.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
/** pretty: readable, coloured lines for a person at a terminal; json: one JSON object a line, for machines. */
export type LogFormat = 'pretty' | 'json';

export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type TraceSampler = (typeof TRACE_SAMPLERS)[number];

export interface ObservabilitySettings {
  readonly logLevel: LogLevel;
  readonly logFormat: LogFormat;
  /** GET /metrics (Prometheus text format). */
  readonly metrics: boolean;
  /** Where GET /metrics is answered, and who may read it. */
  readonly metricsAccess: {
    /** METRICS_PORT: a listener of its own, answering /metrics only; undefined: none. */
    readonly port: number | undefined;
    /** METRICS_HOST: the address that listener binds (loopback unless told). */
    readonly host: string;
    /**
     * METRICS_TOKEN: when set, every /metrics request, on any port, must carry it as `Authorization: Bearer <token>`.
     */
    readonly token: string | undefined;
    /**
     * The main port answers /metrics: always with a token; without one, outside production and without METRICS_PORT.
     */
    readonly onMainPort: boolean;
  };
  /**
   * OpenTelemetry tracing, configured by the standard OTEL_* variables: on when
   * OTEL_TRACES_EXPORTER names an exporter or an OTLP endpoint is set (and
   * OTEL_SDK_DISABLED is not true); when off, no SDK is loaded.
   */
  readonly tracing: {
    readonly enabled: boolean;
    /** OTEL_TRACES_EXPORTER: OTLP over HTTP, or the console (stdout). */
    readonly exporter: 'otlp' | 'console';
    /** Where spans are POSTed (OTLP over HTTP). */
    readonly tracesUrl: string;
    /**
     * OTEL_EXPORTER_OTLP_HEADERS, then OTEL_EXPORTER_OTLP_TRACES_HEADERS (e.g. a collector's API key: never logged).
     */
    readonly headers: Readonly<Record<string, string>>;
    readonly serviceName: string;
    /** OTEL_RESOURCE_ATTRIBUTES. */
    readonly resourceAttributes: Readonly<Record<string, string>>;
    /** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (a ratio for the *traceidratio samplers). */
    readonly sampler: { readonly name: TraceSampler; readonly ratio: number };
  };
}

/** Logs, metrics and traces; `port` and `webhookPort` are the listeners METRICS_PORT must not repeat. */
export function observabilitySettings(
  env: Env,
  { production, port, webhookPort }: { production: boolean; port: number; webhookPort: number | undefined },
): ObservabilitySettings {
  const metricsPort = extraPort(env, 'METRICS_PORT', [
    ['PORT', port],
    ['WEBHOOK_PORT', webhookPort],
  ]);
  const token = metricsToken(env, 'METRICS_TOKEN');
  return {
    logLevel: oneOf(env, 'LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
    // The one default not read from env: whether a person is watching (a terminal) or a machine collects the lines.
    logFormat: oneOf(env, 'LOG_FORMAT', ['pretty', 'json'] as const, process.stdout.isTTY ? 'pretty' : 'json'),
    metrics: oneOf(env, 'METRICS', ['true', 'false'] as const, 'true') === 'true',
    metricsAccess: {
      port: metricsPort,
      host: text(env, 'METRICS_HOST') ?? '127.0.0.1',
      token,
      // Platform-wide volumes and every tenant's operation names: public only outside production, and only when not
      // asked otherwise.
      onMainPort: token !== undefined || (!production && metricsPort === undefined),
    },
    tracing: tracingConfig(env),
  };
}

/** Shorter metrics tokens are refused: the token is all that stands between the internet and /metrics. */
export const MIN_METRICS_TOKEN_LENGTH = 16;

function metricsToken(env: Env, name: string): string | undefined {
  const token = text(env, name);
  if (token === undefined) return undefined;
  // The token itself is never echoed.
  if (/\s/.test(token))
    throw new ConfigError(name, 'must not contain whitespace (it is sent as "Authorization: Bearer <token>")');
  if (token.length < MIN_METRICS_TOKEN_LENGTH)
    throw new ConfigError(
      name,
      `is ${token.length} characters; at least ${MIN_METRICS_TOKEN_LENGTH} are required (e.g. openssl rand -hex 24)`,
    );
  return token;
}

/**
 * `key=value,key=value` (values URL-encoded), as the OpenTelemetry specification writes headers and resource
 * attributes.
 */
function keyValues(env: Env, name: string): Record<string, string> {
  const raw = text(env, name);
  const pairs: Record<string, string> = {};
  if (raw === undefined) return pairs;
  for (const part of raw.split(',')) {
    if (part.trim() === '') continue;
    const at = part.indexOf('=');
    const key = at > 0 ? part.slice(0, at).trim() : '';
    // The value may be a secret (an API key): the message names the entry, never its value.
    if (key === '') throw new ConfigError(name, 'expected key=value pairs separated by commas');
    try {
      pairs[key] = decodeURIComponent(part.slice(at + 1).trim());
    } catch {
      throw new ConfigError(name, `the value of ${key} is not valid URL-encoding`);
    }
  }
  return pairs;
}

function tracingConfig(env: Env): ObservabilitySettings['tracing'] {
  const exporterName = oneOf(env, 'OTEL_TRACES_EXPORTER', ['otlp', 'console', 'none', 'unset'] as const, 'unset');
  const tracesEndpoint = httpUrlOf(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const endpoint = httpUrlOf(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  const legacy = oneOf(env, 'OTEL_TRACING', ['true', 'false'] as const, 'false') === 'true';
  const disabled = oneOf(env, 'OTEL_SDK_DISABLED', ['true', 'false'] as const, 'false') === 'true';
  const wanted =
    exporterName === 'otlp' ||
    exporterName === 'console' ||
    (exporterName === 'unset' && (tracesEndpoint !== undefined || endpoint !== undefined || legacy));
  const ratio = text(env, 'OTEL_TRACES_SAMPLER_ARG') === undefined ? 1 : Number(text(env, 'OTEL_TRACES_SAMPLER_ARG'));
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1)
    throw new ConfigError(
      'OTEL_TRACES_SAMPLER_ARG',
      `expected a ratio from 0 to 1, got "${text(env, 'OTEL_TRACES_SAMPLER_ARG')}"`,
    );
  return {
    enabled: wanted && !disabled,
    exporter: exporterName === 'console' ? 'console' : 'otlp',
    tracesUrl: tracesEndpoint?.href ?? `${(endpoint?.href ?? 'http://localhost:4318').replace(/\/+$/, '')}/v1/traces`,
    headers: {
      ...keyValues(env, 'OTEL_EXPORTER_OTLP_HEADERS'),
      ...keyValues(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS'),
    },
    serviceName: text(env, 'OTEL_SERVICE_NAME') ?? 'delivery-graph',
    resourceAttributes: keyValues(env, 'OTEL_RESOURCE_ATTRIBUTES'),
    sampler: { name: oneOf(env, 'OTEL_TRACES_SAMPLER', TRACE_SAMPLERS, 'parentbased_always_on'), ratio },
  };
}
