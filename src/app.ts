// The composition root: startApp(config) builds the parts in order, each
// registered for tear-down, and wires them together; stop() (or a failed start)
// closes them newest first. No part is configured here beyond wiring: yoga is in
// graphql/yoga.ts, the HTTP front door in http/server.ts.
import type { Server } from 'node:http';
import type { Config } from './config.js';
import { ClientTokens, clientTokenSecrets } from './access/client-tokens.js';
import type { Services } from './graphql/context.js';
import { PersistedOperations } from './pipeline/persisted-operations.js';
import { localPersistedQueryStore, sharedPersistedQueryStore } from './pipeline/persisted-query-store.js';
import { createRequestLimits } from './access/rate-limit.js';
import { Owners } from './access/owners.js';
import { SubscriptionSlots } from './access/subscription-slots.js';
import type { Pipeline } from './pipeline/pipeline.js';
import { createGraphQLServer, type GraphQLServer } from './pipeline/yoga.js';
import { createReadiness } from './http/readiness.js';
import { openFrontDoor } from './http/server.js';
import { Teardown } from './lifecycle.js';
import { createLogger, type Logger } from './logger.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import { operationMetrics } from './observability/operation-metrics.js';
import { requestScope } from './observability/request.js';
import type { SpanExporterLike } from './observability/tracing.js';
import { ReadAccess } from './realtime/access.js';
import { createEventBus } from './realtime/bus.js';
import { EventPages } from './realtime/event-pages.js';
import { Reconciler } from './realtime/reconcile.js';
import { connectRedisEventBus } from './realtime/redis-bus.js';
import { DEMO_MERCHANTS, startSandbox, type Sandbox } from './sandbox/index.js';
import { RedisStore } from './store/redis.js';
import { SqliteStore } from './store/sqlite.js';
import type { Store } from './store/store.js';
import { createUpstream } from './upstream/clients.js';
import { AppendBatcher, createWebhookReceiver, type WebhookReceiver } from './webhooks/receiver.js';
import { createWebhookVerifier } from './webhooks/verify.js';
import { createGraphiQL, renderGraphiQLPage } from './web/graphiql.js';
import { createTrackingPage } from './web/page.js';

export interface App {
  /** Base URL of the facade, e.g. http://127.0.0.1:4000 */
  url: string;
  port: number;
  /** Where webhooks are received (WEBHOOK_PATH on the main port, or on WEBHOOK_PORT). */
  webhookUrl: string;
  /** Where GET /metrics is served, when it is (on METRICS_PORT, or the main port). */
  metricsUrl: string | undefined;
  server: Server;
  services: Services;
  /** The GraphQL handler, for in-process requests (`app.yoga.fetch`). */
  yoga: GraphQLServer;
  /** The request pipeline every operation runs through (its document cache, for operators and tests). */
  pipeline: Pipeline;
  /** The webhook receiver, when a verification key is known. */
  receiver: WebhookReceiver | undefined;
  /** The embedded sandbox, when it is the upstream. */
  sandbox: Sandbox | undefined;
  logger: Logger;
  /** The Prometheus metrics behind GET /metrics, unless METRICS=false or nowhere serves them (production without METRICS_PORT or METRICS_TOKEN). */
  metrics: Metrics | undefined;
  stop(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
  /** Use this store instead of opening the SQLite file (tests). */
  store?: Store;
  /** With tracing on: export spans here instead of the configured exporter (tests). */
  spanExporter?: SpanExporterLike;
  /** false: every GraphQL HTTP request goes through yoga's handler (tests compare both paths). */
  directHttpPath?: boolean;
}

export async function startApp(config: Config, options: StartOptions = {}): Promise<App> {
  const logger = options.logger ?? createLogger(config.logLevel, undefined, config.logFormat);
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
  // With no UPSTREAM_URL, the embedded sandbox is the upstream.
  const sandbox = config.upstream.url
    ? undefined
    : await startSandbox({ port: config.sandbox.port, host: config.host, merchants: DEMO_MERCHANTS, knobs: { stepMs: config.sandbox.stepMs, returnRate: config.sandbox.returnRate } });
  if (sandbox) teardown.add('sandbox', () => sandbox.stop());

  // Tracing first, so its context manager is in place before anything runs; nothing of it loads when it is off.
  const tracing = config.tracing.enabled ? await (await import('./observability/tracing.js')).startTracing(config.tracing, options.spanExporter) : undefined;
  if (tracing) teardown.add('tracing', () => tracing.shutdown());
  let metrics: Metrics | undefined;
  const debug = logger.isLevelEnabled('debug');
  const upstream = createUpstream({ ...config.upstream, url: sandbox?.url ?? config.upstream.url!, platformId: config.upstream.platformId ?? sandbox!.platformId }, (call) => {
    metrics?.upstreamCall(call);
    if (debug) logger.debug({ reqId: requestScope.getStore()?.id, upstream: call }, 'upstream call');
  });
  teardown.add('upstream', () => upstream.close());
  upstream.onBreakerChange((group, state) => logger[state === 'open' ? 'warn' : 'info']({ group, state }, 'upstream circuit breaker'));

  // With REDIS_URL, events, dedup, idempotency, limits and fan-out are shared by every instance on that Redis.
  // Both stores trim what is older than its retention on a timer, until close().
  const retention = { eventRetentionMs: config.eventRetentionMs, idempotencyRetentionMs: config.idempotencyRetentionMs };
  const store = options.store ?? ((config.redisUrl ?? config.redisSentinel) ? RedisStore.connect((config.redisUrl ?? config.redisSentinel)!, { logger, retention, replicaAcks: { min: config.redisMinReplicasAck, timeoutMs: config.redisReplicaAckTimeoutMs } }) : new SqliteStore(config.dataDir, { retention, logger }));
  teardown.add('store', () => store.close());
  const redis = store instanceof RedisStore ? store : undefined;
  const redisBus = redis ? await connectRedisEventBus(redis, logger) : undefined;
  if (redisBus) teardown.add('redis bus', () => redisBus.close());
  const bus = redisBus ?? createEventBus();
  // Who may see which delivery: one set of owner records for every path (src/access/owners.ts).
  const owners = new Owners(store, { logger });
  teardown.add('owner records', () => owners.flush());
  // Webhooks and reconciliation store events through one batcher: one log order, publications in it.
  const batcher = new AppendBatcher(store, bus, (error) => logger.error({ err: error }, 'stored event not published'));
  // Each instance reads what its own subscribers follow; an event they hear from any instance puts the read off.
  const reconciler = new Reconciler({
    store,
    upstream,
    append: (payload, receivedAt) => batcher.append(payload, receivedAt),
    intervalMs: config.realtime.reconcileIntervalMs,
    maxReadsPerSecond: config.realtime.reconcileMaxReadsPerSecond,
    logger,
  });
  teardown.add('reconciler', () => reconciler.stop());
  const services: Services = {
    config,
    upstream,
    store,
    bus,
    owners,
    access: new ReadAccess(store, upstream, { checksPerSubscription: config.realtime.accessChecksPerMinute, logger, owners }),
    maxPendingEvents: config.realtime.maxPendingEvents,
    bookingsInFlight: new Map(),
    clientTokens: new ClientTokens(clientTokenSecrets(config.clientTokenSecrets, config.dataDir)),
    reconciler,
    subscriptions: new SubscriptionSlots({
      perKey: config.realtime.subscriptionsPerKey,
      perClientToken: config.realtime.subscriptionsPerClientToken,
      perAddress: config.realtime.subscriptionsPerAddress,
    }),
    eventPages: new EventPages(store),
  };

  // Webhooks verify against the configured key, or the sandbox's when it is the upstream.
  const publicKeyPem = config.webhook.publicKeyPems ?? (sandbox ? [sandbox.publicKeyPem] : undefined);
  const issuer = config.webhook.issuer ?? sandbox?.issuer;
  const verifier = publicKeyPem && issuer ? await createWebhookVerifier(publicKeyPem, issuer, { clockToleranceSeconds: config.webhook.clockToleranceSeconds }) : undefined;
  const receiver = verifier && createWebhookReceiver({ verifier, store, bus, logger, bodyTimeoutMs: config.webhook.bodyTimeoutMs, batcher });
  if (!receiver) {
    logger.warn(
      config.realtime.reconcileIntervalMs > 0
        ? `no WEBHOOK_PUBLIC_KEY_FILE: polling alone, subscriptions see what reads of the upstream show every ${config.realtime.reconcileIntervalMs} ms (RECONCILE_INTERVAL_MS); the webhook receiver answers 503`
        : 'no WEBHOOK_PUBLIC_KEY_FILE and RECONCILE_INTERVAL_MS=0: subscriptions see no change after their first state; the webhook receiver answers 503',
    );
  }

  const readiness = createReadiness({ upstream, logger, upstreamCheckMs: config.upstream.healthCheckMs, checkStore: () => store.ping() });
  teardown.add('readiness', () => readiness.stop());
  // The first answer about the upstream before serving, unless it takes longer than a second (then it is reported when it comes).
  await readiness.firstCheck(1_000);
  // Operations by hash: the allowlist when there is one, else automatic persisted queries (an LRU, behind it the store's Redis when there is one).
  const allowlist = config.graphql.persistedOperations?.operations;
  const apqStore = allowlist || config.graphql.apqMaxEntries === 0 ? undefined : localPersistedQueryStore(config.graphql.apqMaxEntries);
  const persisted = new PersistedOperations(allowlist, {
    store: apqStore && redis ? sharedPersistedQueryStore(apqStore, { client: redis.client, prefix: redis.prefix, maxEntries: config.graphql.apqMaxEntries, logger }) : apqStore,
  });
  // In production /metrics is served only where asked for (METRICS_PORT, METRICS_TOKEN): otherwise nothing is collected.
  const metricsServed = config.metricsAccess.onMainPort || config.metricsAccess.port !== undefined;
  if (config.metrics && !metricsServed) logger.warn('/metrics is off in production: set METRICS_PORT (a listener of its own) or METRICS_TOKEN (a bearer token) to serve it');
  if (config.metrics && metricsServed) {
    metrics = createMetrics({
      upstream,
      bus,
      webhooks: receiver?.counters,
      upstreamHealth: readiness.upstream,
      persistedQueries: persisted.counters,
      access: services.access.counters,
      subscriptions: services.subscriptions,
      owners,
      ownerFilter: () => (store instanceof SqliteStore ? store.ownerFilter : undefined),
      reconcile: { counters: reconciler.counters, followed: () => reconciler.followedCount },
      // The pipeline is made below; until then the cache is empty.
      documentCache: () => served?.pipeline.documents.size ?? { entries: 0, bytes: 0 },
    });
    const stopped = metrics;
    teardown.add('metrics', () => stopped.stop());
  }

  const sandboxKey = sandbox?.merchants[0]?.key;
  const graphiql = config.graphql.introspection ? createGraphiQL({ graphqlPath: '/graphql', sandboxKey, logger }) : undefined;
  // Per key, per client token and per client address; shared by every instance through the store's Redis when there is one.
  const limits = createRequestLimits(config, upstream.keys, redis && { client: redis.client, prefix: redis.prefix }, logger);
  const served = createGraphQLServer({
    services,
    logger,
    observers: [...(metrics ? [operationMetrics(metrics)] : []), ...(tracing ? [tracing.observer] : [])],
    limits,
    persisted,
    graphiql: { renderGraphiQL: renderGraphiQLPage, graphiql: graphiql?.options ?? false },
  });
  const { yoga, pipeline } = served;

  const trackingPage = config.trackingPage ? createTrackingPage({ graphqlPath: '/graphql', sandboxKey, graphiql: config.graphql.introspection, logger }) : undefined;
  const http = await openFrontDoor({ config, logger, yoga, pipeline, clientTokens: services.clientTokens, limits, upstream, readiness, receiver, metrics, graphiql, trackingPage, directHttpPath: options.directHttpPath ?? true });
  sandbox?.setWebhookUrl(http.webhookUrl);

  // Graceful stop: readiness fails first so a load balancer drains us, then the
  // front door closes (see FrontDoor.close); then the rest, newest first.
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      readiness.stop();
      await http.close();
      await teardown.run(logger);
    })());

  return { url: http.url, port: http.port, webhookUrl: http.webhookUrl, metricsUrl: http.metricsUrl, server: http.server, services, yoga, pipeline, receiver, sandbox, logger, metrics, stop };
}
