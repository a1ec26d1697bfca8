// Observability over real HTTP: request logs (id, operation, status, duration,
// never a key), x-request-id, and the Prometheus metrics after GraphQL requests,
// an upstream failure and webhooks.
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { request as httpRequest } from 'node:http';
import { SpanKind } from '@opentelemetry/api';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/logger.js';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';
import { deliveryInput, KEYLESS_BUDGETS_OFF, makeDataDir } from '../helpers/stack.js';

let sandbox: Sandbox;
let app: App;
let dataDir: string;
let key: string;
const lines: string[] = [];
const logs = () => lines.map((line) => JSON.parse(line) as Record<string, any>);

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: { stepMs: 0 } });
  dataDir = makeDataDir();
  const keyFile = path.join(dataDir, 'webhook-public.pem');
  writeFileSync(keyFile, sandbox.publicKeyPem);
  const config = loadConfig({
    PORT: '0',
    UPSTREAM_URL: sandbox.url,
    PLATFORM_ID: sandbox.platformId,
    WEBHOOK_PUBLIC_KEY_FILE: keyFile,
    WEBHOOK_ISSUER: sandbox.issuer,
    DATA_DIR: dataDir,
    LOG_LEVEL: 'debug',
    ...KEYLESS_BUDGETS_OFF,
  });
  // An in-memory destination: every line pino writes.
  app = await startApp(config, { logger: createLogger('debug', { write: (line: string) => void lines.push(line) }) });
  sandbox.setWebhookUrl(`${app.url}${config.webhook.path}`);
  key = sandbox.merchants[0]!.key;
});

afterAll(async () => {
  await app?.stop();
  await sandbox?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function gql(query: string, variables?: Record<string, unknown>, headers: Record<string, string> = {}) {
  const response = await fetch(`${app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body: JSON.stringify({ query, variables }),
  });
  return {
    response,
    body: (await response.json()) as { data?: any; errors?: Array<{ extensions?: { code?: string } }> },
  };
}

async function scrape(): Promise<string> {
  const response = await fetch(`${app.url}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
  return response.text();
}

/** The value of one sample, found by metric name and labels (in any order). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([label, value]) => found[label] === value)) return Number(match[3]);
  }
  return undefined;
}

async function waitFor(check: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const AVAILABILITY = 'query Availability { availability { group available errorCode } }';
const CREATE = /* GraphQL */ `
  mutation Book($input: DeliveryInput!) {
    createDelivery(input: $input) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
    }
  }
`;

describe('request ids and logs', () => {
  it('echoes an incoming x-request-id and logs the request with its operation, status and duration', async () => {
    const { response, body } = await gql(AVAILABILITY, undefined, { 'x-request-id': 'test-req-1' });
    expect(body.errors).toBeUndefined();
    expect(response.headers.get('x-request-id')).toBe('test-req-1');
    await waitFor(() => logs().some((log) => log.reqId === 'test-req-1' && log.msg === 'request'));
    const line = logs().find((log) => log.reqId === 'test-req-1' && log.msg === 'request')!;
    expect(line).toMatchObject({
      level: 30,
      method: 'POST',
      path: '/graphql',
      status: 200,
      operation: 'Availability',
      operationType: 'query',
    });
    expect(line.durationMs).toBeGreaterThan(0);
    // Upstream calls at debug, with the request id they were made for.
    const calls = logs().filter((log) => log.msg === 'upstream call' && log.reqId === 'test-req-1');
    expect(calls.length).toBeGreaterThanOrEqual(2);
    expect(calls[0]).toMatchObject({ level: 20, upstream: { outcome: 'ok', status: 200 } });
    expect(calls.map((call) => call.upstream.group).sort()).toEqual(['partner', 'platform']);
  });

  it('generates an id when none (or an unsafe one) is sent', async () => {
    const { response } = await gql(AVAILABILITY);
    expect(response.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const forged = await gql(AVAILABILITY, undefined, { 'x-request-id': 'a b"c' });
    const id = forged.response.headers.get('x-request-id');
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    // Through yoga's own handler (a GET) the operation is named as well.
    const get = await fetch(`${app.url}/graphql?query=${encodeURIComponent('query ViaGet { __typename }')}`, {
      headers: { accept: 'application/json', 'x-request-id': 'test-get' },
    });
    expect(get.status).toBe(200);
    await waitFor(() => logs().some((log) => log.reqId === 'test-get' && log.msg === 'request'));
    expect(logs().find((log) => log.reqId === 'test-get' && log.msg === 'request')).toMatchObject({
      operation: 'ViaGet',
      method: 'GET',
      status: 200,
    });
  });

  it('gives a WebSocket upgrade an id and a log line too, like any request through the front door', async () => {
    const { default: WebSocket } = await import('ws');
    const socket = new WebSocket(`${app.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws', {
      headers: { 'x-request-id': 'upgrade-7' },
    });
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    socket.terminate();
    expect(logs()).toContainEqual(
      expect.objectContaining({ msg: 'upgrade', reqId: 'upgrade-7', path: '/graphql', upgrade: 'websocket' }),
    );
  });

  it('never writes a key to the log', async () => {
    await gql(AVAILABILITY, undefined, { authorization: 'Bearer sk_not_a_real_key_123' });
    await waitFor(() => logs().filter((log) => log.msg === 'request').length >= 4);
    const all = lines.join('');
    expect(all).not.toContain(key);
    expect(all).not.toContain('sk_not_a_real_key_123');
    expect(all.toLowerCase()).not.toContain('bearer');
  });
});

describe('GET /metrics', () => {
  it('counts operations, upstream calls and failures, webhooks, breaker state and subscribers', async () => {
    // A booking: upstream POST, and webhooks from the sandbox's lifecycle.
    const booked = await gql(CREATE, { input: deliveryInput() }, { 'x-request-id': 'test-book' });
    expect(booked.body.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    // An upstream failure: every call answered 5xx.
    sandbox.setKnobs({ errorRate: 1 });
    try {
      const failed = await gql(
        // maxAge 0: from the upstream, not the stored view (READ_MAX_AGE is on here).
        `query Broken { delivery(uid: "${booked.body.data.createDelivery.data.uid}", group: PLATFORM, maxAge: 0) { uid } }`,
      );
      expect(failed.body.errors?.[0]?.extensions?.code).toMatch(/^UPSTREAM_/);
    } finally {
      sandbox.setKnobs({ errorRate: 0 });
    }
    // A webhook that fails verification.
    const rejected = await fetch(`${app.url}/webhooks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer nope' },
      body: '{}',
    });
    expect(rejected.status).toBe(401);
    await waitFor(() => app.receiver!.counters.accepted > 0);

    const text = await scrape();
    expect(
      sample(text, 'delivery_graph_graphql_operations_total', { type: 'query', name: 'Availability', outcome: 'ok' }),
    ).toBeGreaterThanOrEqual(3);
    expect(
      sample(text, 'delivery_graph_graphql_operations_total', { type: 'mutation', name: 'Book', outcome: 'ok' }),
    ).toBe(1);
    expect(
      sample(text, 'delivery_graph_graphql_operations_total', { type: 'query', name: 'Broken', outcome: 'partial' }),
    ).toBe(1);
    expect(
      sample(text, 'delivery_graph_graphql_operation_duration_seconds_count', { type: 'query', name: 'Availability' }),
    ).toBeGreaterThanOrEqual(3);
    expect(
      sample(text, 'delivery_graph_graphql_operation_duration_seconds_sum', { type: 'mutation', name: 'Book' }),
    ).toBeGreaterThan(0);

    expect(
      sample(text, 'delivery_graph_upstream_requests_total', { group: 'platform', method: 'POST', outcome: 'ok' }),
    ).toBe(1);
    const failures = text
      .split('\n')
      .filter((line) => line.startsWith('delivery_graph_upstream_requests_total{') && /outcome="UPSTREAM_/.test(line));
    expect(failures.length).toBeGreaterThan(0);
    expect(
      sample(text, 'delivery_graph_upstream_request_duration_seconds_count', { group: 'partner', method: 'GET' }),
    ).toBeGreaterThanOrEqual(3);
    // Route templates, not identifiers.
    expect(text).not.toContain(booked.body.data.createDelivery.data.uid);
    expect(text).toMatch(/route="\/\{platform\}\/deliveries\/\{uid\}"|route="[^"]*\{uid\}[^"]*"/);

    expect(sample(text, 'delivery_graph_upstream_breaker_state', { group: 'platform' })).toBe(0);
    expect(sample(text, 'delivery_graph_upstream_breaker_state', { group: 'partner' })).toBe(0);
    expect(sample(text, 'delivery_graph_webhooks_total', { result: 'rejected' })).toBe(1);
    expect(sample(text, 'delivery_graph_webhooks_total', { result: 'accepted' })).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'delivery_graph_webhooks_total', { result: 'duplicate' })).toBeGreaterThanOrEqual(0);
    expect(sample(text, 'delivery_graph_webhooks_total', { result: 'stale' })).toBeGreaterThanOrEqual(0);
    expect(sample(text, 'delivery_graph_subscribers')).toBe(0);
    // Default process metrics.
    expect(sample(text, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(text).toContain('nodejs_eventloop_lag_seconds');
    // No key, no operation text.
    expect(text).not.toContain(key);
    expect(text).not.toContain('availability {');
  });

  it('exports how long the event loop was held since the previous scrape, max and p99', async () => {
    await scrape(); // the window starts here
    // The facade runs in this process: holding this loop holds the facade's.
    const until = performance.now() + 150;
    while (performance.now() < until);
    // One more turn, so that the sampling timer, due during the hold, fires late and records it.
    await new Promise((resolve) => setTimeout(resolve, 5));
    const held = await scrape();
    const max = sample(held, 'delivery_graph_event_loop_delay_max_seconds')!;
    const p99 = sample(held, 'delivery_graph_event_loop_delay_p99_seconds')!;
    expect(max).toBeGreaterThanOrEqual(0.14);
    expect(max).toBeLessThan(5);
    expect(p99).toBeGreaterThanOrEqual(0);
    expect(p99).toBeLessThanOrEqual(max);
    // The next window no longer holds that hold.
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(sample(await scrape(), 'delivery_graph_event_loop_delay_max_seconds')).toBeLessThan(0.14);
  });

  it('is logged at debug, not info', async () => {
    await fetch(`${app.url}/metrics`, { headers: { 'x-request-id': 'test-scrape' } });
    await waitFor(() => logs().some((log) => log.reqId === 'test-scrape'));
    expect(logs().find((log) => log.reqId === 'test-scrape')).toMatchObject({
      level: 20,
      path: '/metrics',
      status: 200,
    });
  });
});

describe('OpenTelemetry tracing (the standard OTEL_* variables, in-memory exporter)', () => {
  it("traces a request from its HTTP server span through the GraphQL operation to each upstream request, under the caller's traceparent", async () => {
    const spans: ReadableSpan[] = [];
    // (InMemorySpanExporter forgets its spans on shutdown, which is when the batch is flushed.)
    const exporter: SpanExporter = {
      export: (batch, done) => {
        spans.push(...batch);
        done({ code: 0 });
      },
      shutdown: async () => undefined,
    };
    const traced = await startApp(
      loadConfig({
        PORT: '0',
        UPSTREAM_URL: sandbox.url,
        PLATFORM_ID: sandbox.platformId,
        // A data folder of its own: the app above holds the shared one.
        DATA_DIR: path.join(dataDir, 'traced'),
        LOG_LEVEL: 'silent',
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_SERVICE_NAME: 'dg-under-test',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=test',
      }),
      { spanExporter: exporter },
    );
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    try {
      // Sent with node:http, not fetch: fetch is undici, whose instrumentation (live in this process now) would add a
      // traceparent of its own.
      const status = await new Promise<number>((resolve, reject) => {
        const body = JSON.stringify({ query: AVAILABILITY });
        const request = httpRequest(`${traced.url}/graphql`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
            authorization: `Bearer ${key}`,
            traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
          },
        });
        request.on('response', (response) => {
          response.resume();
          response.on('end', () => resolve(response.statusCode!));
        });
        request.on('error', reject);
        request.end(body);
      });
      expect(status).toBe(200);
      // Probes are not traced.
      await fetch(`${traced.url}/health`);
    } finally {
      await traced.stop(); // flushes the batch processor
    }
    const ours = spans.filter((span) => span.spanContext().traceId === traceId);
    const server = ours.find((span) => span.kind === SpanKind.SERVER && span.attributes['url.path'] === '/graphql');
    expect(server, JSON.stringify(ours.map((span) => span.name))).toBeDefined();
    expect(server!.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.response.status_code': 200 });
    expect(server!.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(server!.resource.attributes).toMatchObject({
      'service.name': 'dg-under-test',
      'deployment.environment.name': 'test',
    });

    const operation = ours.find((span) => span.name === 'query Availability');
    expect(operation).toBeDefined();
    expect(operation!.kind).toBe(SpanKind.INTERNAL);
    expect(operation!.parentSpanContext?.spanId).toBe(server!.spanContext().spanId);
    expect(operation!.attributes).toMatchObject({
      'graphql.operation.type': 'query',
      'graphql.operation.name': 'Availability',
    });

    // One CLIENT span per upstream request (undici's instrumentation), under the operation: availability asks both
    // groups.
    const upstream = ours.filter(
      (span) => span.kind === SpanKind.CLIENT && span.parentSpanContext?.spanId === operation!.spanContext().spanId,
    );
    expect(upstream.map((span) => new URL(String(span.attributes['url.full'])).pathname).sort()).toEqual(
      ['/api/v1/availability', `/api/v1/${sandbox.platformId}/availability`].sort(),
    );
    for (const span of upstream)
      expect(span.attributes).toMatchObject({ 'http.request.method': 'GET', 'http.response.status_code': 200 });
    expect(spans.some((span) => span.kind === SpanKind.SERVER && span.attributes['url.path'] === '/health')).toBe(
      false,
    );
    // No key in any attribute.
    expect(JSON.stringify(spans.map((span) => span.attributes))).not.toContain(key);
  });

  it('is off unless asked for, and OTEL_SDK_DISABLED wins', () => {
    expect(loadConfig({}).tracing.enabled).toBe(false);
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).tracing).toMatchObject({
      enabled: true,
      tracesUrl: 'http://collector:4318/v1/traces',
    });
    expect(loadConfig({ OTEL_TRACES_EXPORTER: 'console' }).tracing).toMatchObject({
      enabled: true,
      exporter: 'console',
    });
    expect(
      loadConfig({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).tracing
        .enabled,
    ).toBe(false);
    expect(loadConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }).tracing.enabled).toBe(false);
    expect(
      loadConfig({
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_EXPORTER_OTLP_HEADERS: 'api-key=s%3Dcret,x-team=ops',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
      }).tracing,
    ).toMatchObject({
      headers: { 'api-key': 's=cret', 'x-team': 'ops' },
      sampler: { name: 'parentbased_traceidratio', ratio: 0.25 },
    });
  });
});

describe('faults inside the facade', () => {
  it('logs what was masked as "Unexpected error.", with the field path and request id, and sends none of it', async () => {
    const platform = app.services.upstream.platform as { get: (...args: unknown[]) => Promise<unknown> };
    const original = platform.get;
    platform.get = async () => {
      throw new TypeError("Cannot read properties of undefined (reading 'detail-for-operators')");
    };
    try {
      const { body } = await gql('{ delivery(uid: "33333333-3333-4333-8333-333333333333") { uid } }', undefined, {
        'x-request-id': 'fault-1',
      });
      expect(body.errors?.[0]).toMatchObject({
        message: 'Unexpected error.',
        extensions: { code: 'INTERNAL_SERVER_ERROR' },
      });
      expect(JSON.stringify(body)).not.toContain('detail-for-operators');
    } finally {
      platform.get = original;
    }
    const logged = logs().find((line) => line.level === 50 && line.err?.message?.includes('detail-for-operators'));
    expect(logged, 'an error line for the masked fault').toBeDefined();
    expect(logged).toMatchObject({ reqId: 'fault-1', path: 'delivery' });
    expect(logged!.err.stack).toContain('detail-for-operators');
  });
});

describe('refusals in the access log', () => {
  it('logs a GraphQL request refused UNAUTHENTICATED (HTTP 200) with its request id and error code', async () => {
    const { response, body } = await gql(AVAILABILITY, undefined, {
      authorization: 'Bearer sk_test_refused_by_the_upstream',
      'x-request-id': 'refused-key-1',
    });
    expect(response.status).toBe(200);
    expect(body.errors?.map((error) => error.extensions?.code)).toContain('UNAUTHENTICATED');
    await waitFor(() => logs().some((log) => log.reqId === 'refused-key-1' && log.msg === 'request'));
    expect(logs().find((log) => log.reqId === 'refused-key-1' && log.msg === 'request')).toMatchObject({
      status: 200,
      path: '/graphql',
      errorCodes: ['UNAUTHENTICATED'],
    });
  });

  it('logs a request without a key the same way, refused before validation', async () => {
    const response = await fetch(`${app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'no-key-1' },
      body: JSON.stringify({ query: AVAILABILITY }),
    });
    expect(
      ((await response.json()) as { errors: Array<{ extensions: { code: string } }> }).errors[0]!.extensions.code,
    ).toBe('UNAUTHENTICATED');
    await waitFor(() => logs().some((log) => log.reqId === 'no-key-1' && log.msg === 'request'));
    expect(logs().find((log) => log.reqId === 'no-key-1' && log.msg === 'request')).toMatchObject({
      status: response.status,
      errorCodes: ['UNAUTHENTICATED'],
    });
  });

  it('gives a result without errors no error codes', async () => {
    await gql(AVAILABILITY, undefined, { 'x-request-id': 'fine-1' });
    await waitFor(() => logs().some((log) => log.reqId === 'fine-1' && log.msg === 'request'));
    expect(logs().find((log) => log.reqId === 'fine-1' && log.msg === 'request')).not.toHaveProperty('errorCodes');
  });

  it('logs a refused webhook with its request id, in the warning and in the access log with its code', async () => {
    const rejected = await fetch(`${app.url}/webhooks`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer not-a-jwt',
        'x-request-id': 'bad-webhook-1',
      },
      body: '{}',
    });
    expect(rejected.status).toBe(401);
    await waitFor(() => logs().some((log) => log.reqId === 'bad-webhook-1' && log.msg === 'request'));
    expect(
      logs().find((log) => log.msg === 'webhook rejected: verification failed' && log.reqId === 'bad-webhook-1'),
    ).toMatchObject({ level: 40 });
    expect(logs().find((log) => log.reqId === 'bad-webhook-1' && log.msg === 'request')).toMatchObject({
      path: '/webhooks',
      status: 401,
      errorCodes: ['invalid_token'],
    });
  });

  it('writes every line with the process that wrote it', () => {
    expect(logs().length).toBeGreaterThan(0);
    expect(logs().every((log) => log.pid === process.pid)).toBe(true);
    // One process, not one of WORKERS.
    expect(logs().some((log) => 'worker' in log)).toBe(false);
  });
});
