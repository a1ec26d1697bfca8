// startApp(config) → one HTTP server for GraphQL (yoga), health and readiness,
// and the webhook receiver; with no UPSTREAM_URL, the embedded sandbox too.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { useGraphQlJit } from '@envelop/graphql-jit';
import type { GraphQLError } from 'graphql';
import { createGraphQLError, createYoga, maskError as yogaMaskError, type YogaServerInstance } from 'graphql-yoga';
import type { Config } from './config.js';
import { DeliveryGraphError } from './errors.js';
import { createContext, type GraphQLContext, type Services } from './graphql/context.js';
import { createGraphQLHttpHandler } from './graphql/http.js';
import { createCors } from './http/cors.js';
import { createReadiness } from './http/readiness.js';
import { Teardown } from './lifecycle.js';
import { applyServerLimits, serverOptions } from './http/server-limits.js';
import { PersistedOperations } from './graphql/persisted-operations.js';
import { protectionPlugins } from './graphql/protection.js';
import { createRequestLimits } from './graphql/rate-limit.js';
import { toSchema } from './graphql/schema.js';
import { createLogger, type Logger } from './logger.js';
import { useObservability } from './observability/graphql-plugin.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import { attachRequestInfo, requestId, requestScope, type RequestInfo } from './observability/request.js';
import type { SpanExporterLike, Tracing } from './observability/tracing.js';
import { DEFAULT_PLATFORM_ID, startSandbox, type Sandbox } from './sandbox/index.js';
import { RedisStore } from './store/redis.js';
import { SqliteStore } from './store/sqlite.js';
import type { Store } from './store/store.js';
import { createUpstream, type Upstream } from './upstream/clients.js';
import { ReadAccess } from './realtime/access.js';
import { createEventBus } from './realtime/bus.js';
import { connectRedisEventBus } from './realtime/redis-bus.js';
import { attachGraphQLWebSocket } from './realtime/ws.js';
import { createWebhookReceiver, type WebhookReceiver } from './webhooks/receiver.js';
import { createWebhookVerifier } from './webhooks/verify.js';
import { createGraphiQL, renderGraphiQLPage } from './web/graphiql.js';
import { createTrackingPage } from './web/page.js';

export interface App {
  /** Base URL of the facade, e.g. http://127.0.0.1:4000 */
  url: string;
  port: number;
  server: Server;
  services: Services;
  /** The GraphQL handler, for in-process requests (`app.yoga.fetch`). */
  yoga: YogaServerInstance<Record<string, unknown>, GraphQLContext>;
  /** The webhook receiver, when a verification key is known. */
  receiver: WebhookReceiver | undefined;
  /** The embedded sandbox, when it is the upstream. */
  sandbox: Sandbox | undefined;
  logger: Logger;
  /** The Prometheus metrics behind GET /metrics, unless METRICS=false. */
  metrics: Metrics | undefined;
  stop(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  /** Use this store instead of opening the SQLite file (tests). */
  store?: Store;
  /** With OTEL_TRACING=true: export spans here instead of OTLP over HTTP (tests). */
  spanExporter?: SpanExporterLike;
  /** false: every GraphQL HTTP request goes through yoga's handler (tests compare both paths). */
  directHttpPath?: boolean;
}

/**
 * Fixed keys for the embedded sandbox, so the README's examples can be pasted
 * as they are. They open nothing but the in-process simulator.
 */
export const SANDBOX_DEMO_MERCHANTS = [
  { key: 'sk_test_demo_merchant', name: 'Demo Merchant', platformId: DEFAULT_PLATFORM_ID },
  { key: 'sk_test_second_merchant', name: 'Second Merchant', platformId: DEFAULT_PLATFORM_ID },
];

/**
 * Turns our typed errors into GraphQL errors with a stable extensions.code;
 * everything else is masked as "Unexpected error." (INTERNAL_SERVER_ERROR), and
 * the original, which only the operator may see, is logged.
 */
function maskErrorWith(logger: Logger) {
  return (error: unknown, message: string, isDev?: boolean): Error => {
    const masked = maskError(error, message, isDev);
    if ((masked as Partial<GraphQLError>).extensions?.code === 'INTERNAL_SERVER_ERROR') {
      const located = error as Partial<GraphQLError> | undefined;
      logger.error({ reqId: requestScope.getStore()?.id, err: located?.originalError ?? error, path: located?.path?.join('.') }, 'unexpected error in a GraphQL operation (answered "Unexpected error.")');
    }
    return masked;
  };
}

function maskError(error: unknown, message: string, isDev?: boolean): Error {
  // Duck-typed: graphql may be loaded twice (ESM and CJS), so instanceof GraphQLError is unreliable.
  const located = error as Partial<GraphQLError> | undefined;
  const original = located?.originalError ?? error;
  if (original instanceof DeliveryGraphError) {
    // An upstream refusal of a body we did not send (a read, a cancel) is not the client's input: say so, without the upstream's words.
    if (original.code === 'VALIDATION') {
      return createGraphQLError('The delivery service refused the request.', {
        nodes: located?.nodes,
        source: located?.source,
        positions: located?.positions,
        path: located?.path,
        extensions: { code: 'UPSTREAM_ERROR' },
      });
    }
    return createGraphQLError(original.message, {
      nodes: located?.nodes,
      source: located?.source,
      positions: located?.positions,
      path: located?.path,
      extensions: { code: original.code },
    });
  }
  return yogaMaskError(error, message, isDev);
}

export async function startApp(config: Config, options: StartOptions = {}): Promise<App> {
  const logger = options.logger ?? createLogger(config.logLevel);
  const teardown = new Teardown();
  try {
    return await buildApp(config, options, logger, teardown);
  } catch (error) {
    // A failed start (a busy port, Redis not answering) closes what it had opened, newest first.
    await teardown.run(logger).catch(() => undefined);
    throw error;
  }
}

async function buildApp(config: Config, options: StartOptions, logger: Logger, teardown: Teardown): Promise<App> {
  let sandbox: Sandbox | undefined;
  let upstreamUrl = config.upstream.url;
  let platformId = config.upstream.platformId;
  if (!upstreamUrl) {
    sandbox = await startSandbox({
      port: config.sandbox.port,
      host: config.host,
      merchants: SANDBOX_DEMO_MERCHANTS,
      knobs: { stepMs: config.sandbox.stepMs, returnRate: config.sandbox.returnRate },
    });
    const started = sandbox;
    teardown.add('sandbox', () => started.stop());
    upstreamUrl = sandbox.url;
    platformId ??= sandbox.platformId;
  }

  // Tracing first, so its context manager is in place before anything runs; nothing of it loads when it is off.
  const tracing: Tracing | undefined = config.tracing.enabled
    ? await (await import('./observability/tracing.js')).startTracing(config.tracing, options.spanExporter)
    : undefined;
  if (tracing) teardown.add('tracing', () => tracing.shutdown());
  let metrics: Metrics | undefined;
  // The request id reaches upstream-call logs through an AsyncLocalStorage, entered only when those logs are on.
  const debug = logger.isLevelEnabled('debug');
  const logRequests = logger.isLevelEnabled('info');

  const upstream: Upstream = createUpstream(
    {
      url: upstreamUrl,
      platformId: platformId!,
      timeoutMs: config.upstream.timeoutMs,
      connections: config.upstream.connections,
      maxResponseBytes: config.upstream.maxResponseBytes,
      breaker: config.upstream.breaker,
    },
    (call) => {
      metrics?.upstreamCall(call);
      tracing?.upstreamCall(call);
      if (debug) logger.debug({ reqId: requestScope.getStore()?.id, upstream: call }, 'upstream call');
    },
  );
  teardown.add('upstream', () => upstream.close());
  upstream.onBreakerChange((group, state) => logger[state === 'open' ? 'warn' : 'info']({ group, state }, 'upstream circuit breaker'));
  // With REDIS_URL, events, dedup, idempotency and fan-out are shared by every instance on that Redis.
  // Both trim what is older than its retention on a timer, until store.close().
  const retention = { eventRetentionMs: config.eventRetentionMs, idempotencyRetentionMs: config.idempotencyRetentionMs };
  const store = options.store ?? (config.redisUrl ? RedisStore.connect(config.redisUrl, { logger, retention }) : new SqliteStore(config.dataDir, { retention, logger }));
  teardown.add('store', () => store.close());
  const redisBus = store instanceof RedisStore ? await connectRedisEventBus(store, logger) : undefined;
  if (redisBus) teardown.add('redis bus', () => redisBus.close());
  const bus = redisBus ?? createEventBus();
  const access = new ReadAccess(store, upstream);
  const services: Services = { config, upstream, store, bus, access, maxPendingEvents: config.realtime.maxPendingEvents };

  // Webhooks verify against the configured key, or the sandbox's when it is the upstream.
  const publicKeyPem = config.webhook.publicKeyPem ?? sandbox?.publicKeyPem;
  const issuer = config.webhook.issuer ?? sandbox?.issuer;
  const receiver: WebhookReceiver | undefined =
    publicKeyPem && issuer ? createWebhookReceiver({ verifier: await createWebhookVerifier(publicKeyPem, issuer), store, bus, logger, bodyTimeoutMs: config.webhook.bodyTimeoutMs }) : undefined;
  if (!receiver) logger.warn('no WEBHOOK_PUBLIC_KEY_FILE: the webhook receiver answers 503 and subscriptions see no events');
  const readiness = createReadiness({
    upstream,
    logger,
    upstreamCheckMs: config.upstream.healthCheckMs,
    checkStore: () => store.ping(),
  });
  teardown.add('readiness', () => readiness.stop());
  // The first answer about the upstream before serving, unless it takes longer than a second (then it is reported when it comes).
  await readiness.firstCheck(1_000);
  if (config.metrics) metrics = createMetrics({ upstream, bus, webhooks: receiver?.counters, upstreamHealth: readiness.upstream });

  const persisted = config.graphql.persistedOperations && new PersistedOperations(config.graphql.persistedOperations.operations);
  const graphiql = config.graphql.introspection ? createGraphiQL({ graphqlPath: '/graphql', sandboxKey: sandbox?.merchants[0]?.key, logger }) : undefined;
  // Per key and per client address; shared by every instance through the store's Redis when there is one.
  const limiter = createRequestLimits(config, upstream.keys, store instanceof RedisStore ? { client: store.client, prefix: store.prefix } : undefined, logger);
  const yoga: YogaServerInstance<Record<string, unknown>, GraphQLContext> = createYoga({
    schema: toSchema(),
    graphqlEndpoint: '/graphql',
    landingPage: false,
    // CORS is the front door's (see handle below), the same for every path.
    cors: false,
    logging: false,
    // GraphiQL from bundled assets (no CDN, works offline), with examples and the header to set filled in; web/graphiql.ts serves its files.
    renderGraphiQL: renderGraphiQLPage,
    graphiql: graphiql?.options ?? false,
    // Never the original message or stack, whatever NODE_ENV says.
    maskedErrors: { maskError: maskErrorWith(logger), isDev: false },
    // No uploads in this schema; multipart is also a form a foreign site can POST.
    multipart: false,
    maxRequestBodySize: config.graphql.maxBodyBytes,
    // Limits, allowlist and rate limit first (graphql/protection.ts), then compiled execution:
    // each distinct operation is compiled once (graphql-jit), then run without the interpreter.
    // Observation first, so operations a later plugin refuses are counted too.
    plugins: [
      useObservability(metrics),
      ...(tracing ? [tracing.plugin] : []),
      ...protectionPlugins({ config, limiter, persisted }),
      // Subscriptions too: their fields read their own arguments (see argumentsOf in graphql/events.ts).
      useGraphQlJit(),
    ],
    // Over WebSocket the initial context carries the connection_init authorization and a way to close the socket.
    // Every transport hands over the Node request (req): the client address comes from it.
    context: (initial: Record<string, unknown>) => {
      const { request, req, authorization, disconnect, signal } = initial as {
        request?: Request;
        req?: IncomingMessage;
        authorization?: string;
        disconnect?: (code: number, reason: string) => void;
        signal?: AbortSignal | (() => AbortSignal);
      };
      return createContext(services, {
        authorization: authorization ?? request?.headers.get('authorization'),
        req,
        limits: limiter,
        disconnect,
        signal: signal ?? (() => request?.signal),
      });
    },
  });

  // Over SSE a subscriber may leave about 1 KiB per allowed pending event unread before it is cut off.
  const graphqlHttp = createGraphQLHttpHandler(yoga, {
    maxBodyBytes: config.graphql.maxBodyBytes,
    maxSseBufferedBytes: config.realtime.maxPendingEvents * 1024,
    direct: options.directHttpPath ?? true,
  });
  const cors = createCors(config.corsOrigins);
  const trackingPage = config.trackingPage
    ? createTrackingPage({ graphqlPath: '/graphql', sandboxKey: sandbox?.merchants[0]?.key, graphiql: config.graphql.introspection, logger })
    : undefined;

  let draining = false;

  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const route = (req: IncomingMessage, res: ServerResponse, pathname: string) => {
    if (graphiql?.handle(req, res, pathname)) return;
    if (pathname === '/graphql') return graphqlHttp(req, res);
    if (pathname === config.webhook.path) {
      if (receiver) return receiver.handle(req, res);
      return json(res, 503, { error: 'webhooks_not_configured', message: 'Set WEBHOOK_PUBLIC_KEY_FILE and WEBHOOK_ISSUER to receive webhooks.' });
    }
    if (pathname === '/health') return json(res, 200, { status: 'ok' });
    if (pathname === '/metrics' && metrics) return metrics.handle(req, res);
    if (trackingPage?.handle(req, res, pathname)) return;
    if (pathname === '/ready') return readiness.handle(res, draining);
    json(res, 404, { error: 'not_found', message: `Nothing at ${pathname}. GraphQL is at /graphql.` });
  };

  /** Probes and scrapes log at debug, everything else at info. */
  const quiet = new Set(['/health', '/ready', '/metrics']);
  // Every request gets an id (the caller's x-request-id when it is a plain token), echoed in
  // the response; with LOG_LEVEL info or lower, one log line when the response is done.
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const pathname = (req.url ?? '/').split('?', 1)[0]!;
    const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
    attachRequestInfo(req, info);
    res.setHeader('x-request-id', info.id);
    // While stopping, each keep-alive connection closes after its answer: the upstream's
    // webhook sender (and any client) would otherwise keep it busy until the grace period ends.
    if (draining) res.setHeader('connection', 'close');
    // CORS before any path is chosen, so every answer carries it; a preflight is answered here.
    const preflight = cors.handle(req, res);
    if (logRequests) {
      const started = performance.now();
      res.once('close', () => {
        const level = quiet.has(pathname) ? 'debug' : 'info';
        logger[level](
          {
            reqId: info.id,
            method: req.method,
            path: pathname,
            status: res.statusCode,
            durationMs: Math.round((performance.now() - started) * 1000) / 1000,
            ...(info.operationName !== undefined || info.operationType !== undefined
              ? { operation: info.operationName ?? null, operationType: info.operationType }
              : {}),
            ...(res.writableFinished ? {} : { aborted: true }),
          },
          'request',
        );
      });
    }
    if (preflight) return;
    if (debug) return requestScope.run(info, route, req, res, pathname);
    route(req, res, pathname);
  };

  // Headers up to the largest webhook token (it travels in Authorization); connection cap and deadlines.
  const limits = { ...config.server, maxTokenBytes: config.webhook.maxTokenBytes };
  const server = createServer(serverOptions(limits), handle);
  server.keepAliveTimeout = 65_000;
  applyServerLimits(server, limits, (status, path, reason) => {
    if (path === config.webhook.path && receiver) return receiver.countRefusal(status, reason);
    logger.warn({ status, path, reason }, 'request refused by the HTTP server');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => resolve());
  });
  // After listen: a listen error (a busy port) is then the server's alone, not re-emitted by the WebSocket server.
  const ws = attachGraphQLWebSocket(server, yoga, { maxSubscriptions: config.realtime.maxSubscriptionsPerSocket, persisted, allowOrigin: cors.allows });
  const port = (server.address() as AddressInfo).port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  sandbox?.setWebhookUrl(`${url}${config.webhook.path}`);

  // Graceful stop: readiness fails first so a load balancer drains us; WebSockets
  // close with 1001; in-flight requests (webhooks included, so their events are
  // stored and acknowledged) get up to SHUTDOWN_GRACE_MS to finish; then the store closes.
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      draining = true;
      readiness.stop();
      await ws.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const grace = setTimeout(() => server.closeAllConnections(), config.shutdownGraceMs);
      await closed;
      clearTimeout(grace);
      // Then the rest, newest first: every part is closed even when one fails.
      await teardown.run(logger);
    })());

  return { url, port, server, services, yoga, receiver, sandbox, logger, metrics, stop };
}
