// The composition root: startApp(config) builds the parts in order, each
// registered for tear-down, and wires them together; stop() (or a failed start)
// closes them newest first. No part is configured here beyond wiring: each is
// built in the folder that owns it (store/open.ts, realtime/start.ts,
// webhooks/start.ts, observability/start.ts, pipeline/yoga.ts, http/server.ts …).
import type { Server } from 'node:http';
import type { Config } from './config.js';
import { startEmbeddedSandbox } from './embedded-sandbox.js';
import { ClientTokens, clientTokenSecrets } from './access/client-tokens.js';
import type { Services } from './graphql/context.js';
import { configuredPersistedOperations } from './pipeline/persisted-operations.js';
import { createRequestLimits } from './access/rate-limit.js';
import { Owners } from './access/owners.js';
import { Merchants } from './access/merchants.js';
import type { Pipeline } from './pipeline/pipeline.js';
import { createGraphQLServer, type GraphQLServer } from './pipeline/yoga.js';
import { createReadiness } from './http/readiness.js';
import { openFrontDoor } from './http/server.js';
import { Teardown } from './lifecycle.js';
import { createLogger, type Logger } from './logger.js';
import type { Metrics } from './observability/metrics.js';
import { operationMetrics } from './observability/operation-metrics.js';
import { requestScope } from './observability/request.js';
import { startMetrics } from './observability/start.js';
import type { SpanExporterLike } from './observability/tracing.js';
import { openEventBus, startRealtime } from './realtime/start.js';
import type { Sandbox } from '@delivery-graph/sandbox';
import { openStore } from './store/open.js';
import { proofRefreshMs } from './store/retention.js';
import { RedisStore } from './store/redis.js';
import type { Store } from './store/store.js';
import { createUpstream } from './upstream/clients.js';
import { AppendBatcher, type WebhookReceiver } from './webhooks/receiver.js';
import { startWebhooks } from './webhooks/start.js';
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
  /**
   * The Prometheus metrics behind GET /metrics, unless METRICS=false or nowhere serves them (production without
   * METRICS_PORT or METRICS_TOKEN).
   */
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
  // Redis with REDIS_URL, else SQLite (store/open.ts). Opened first: SQLite's holds DATA_DIR, the sandbox's world
  // included.
  const store = options.store ?? openStore(config, logger);
  teardown.add('store', () => store.close());
  // With no UPSTREAM_URL, the embedded sandbox is the upstream (embedded-sandbox.ts); paused until it knows where
  // webhooks go.
  const sandbox = config.upstream.url ? undefined : await startEmbeddedSandbox(config, logger);
  if (sandbox) teardown.add('sandbox', () => sandbox.stop());

  // Tracing first, so its context manager is in place before anything runs; nothing of it loads when it is off.
  const tracing = config.tracing.enabled
    ? await (await import('./observability/tracing.js')).startTracing(config.tracing, options.spanExporter)
    : undefined;
  if (tracing) teardown.add('tracing', () => tracing.shutdown());
  let metrics: Metrics | undefined;
  const debug = logger.isLevelEnabled('debug');
  const upstream = createUpstream(
    {
      ...config.upstream,
      url: sandbox?.url ?? config.upstream.url!,
      platformId: config.upstream.platformId ?? sandbox!.platformId,
    },
    (call) => {
      metrics?.upstreamCall(call);
      if (debug) logger.debug({ reqId: requestScope.getStore()?.id, upstream: call }, 'upstream call');
    },
  );
  teardown.add('upstream', () => upstream.close());
  upstream.onBreakerChange((group, state) =>
    logger[state === 'open' ? 'warn' : 'info']({ group, state }, 'upstream circuit breaker'),
  );

  const redis = store instanceof RedisStore ? store : undefined;
  const bus = await openEventBus(redis, logger, teardown);
  // Who may see which delivery: one set of merchants and owner records for every path (src/access/owners.ts).
  const merchants = new Merchants(store);
  const owners = new Owners(store, {
    logger,
    merchants,
    readScope: config.upstream.readScope,
    proofRefreshMs: proofRefreshMs(config),
  });
  teardown.add('owner records', () => owners.flush());
  // Webhooks and reconciliation store events through one batcher: one log order, publications in it.
  const batcher = new AppendBatcher(store, bus, (error) => logger.error({ err: error }, 'stored event not published'));
  // Reconciliation, key re-confirmation, read access, subscription caps, event pages, fan-out (realtime/start.ts).
  const realtime = startRealtime(
    {
      config,
      store,
      upstream,
      bus,
      merchants,
      owners,
      append: (payload, receivedAt) => batcher.append(payload, receivedAt),
      onRead: (kind, delayMs) => metrics?.reconcileRead(kind, delayMs / 1000),
      logger,
    },
    teardown,
  );
  const clientTokens = new ClientTokens(clientTokenSecrets(config.clientTokenSecrets, config.dataDir));
  const services: Services = {
    config,
    upstream,
    store,
    bus,
    owners,
    merchants,
    maxPendingEvents: config.realtime.maxPendingEvents,
    bookingsInFlight: new Map(),
    clientTokens,
    ...realtime,
  };
  const receiver = await startWebhooks(config, sandbox, { store, bus, logger, batcher });

  const readiness = createReadiness({
    upstream,
    logger,
    upstreamCheckMs: config.upstream.healthCheckMs,
    checkStore: () => store.ping(),
  });
  teardown.add('readiness', () => readiness.stop());
  // The first answer about the upstream before serving, unless it takes longer than a second (then it is reported when
  // it comes).
  await readiness.firstCheck(1_000);
  const persisted = configuredPersistedOperations(config.graphql, redis, logger);
  // What /metrics reports on (observability/start.ts); the pipeline is made below, until then its document cache is
  // empty.
  metrics = startMetrics(config, logger, teardown, {
    upstream,
    bus,
    receiver,
    readiness,
    persisted,
    realtime,
    owners,
    pipeline: () => served?.pipeline,
  });

  const sandboxKey = sandbox?.merchants[0]?.key;
  const graphiql = config.graphql.introspection
    ? createGraphiQL({ graphqlPath: '/graphql', sandboxKey, logger })
    : undefined;
  // Per key, per client token and per client address; shared by every instance through the store's Redis when there is
  // one.
  const limits = createRequestLimits(
    config,
    upstream.keys,
    redis && { client: redis.client, prefix: redis.prefix },
    logger,
  );
  const served = createGraphQLServer({
    services,
    logger,
    observers: [...(metrics ? [operationMetrics(metrics)] : []), ...(tracing ? [tracing.observer] : [])],
    limits,
    persisted,
    graphiql: { renderGraphiQL: renderGraphiQLPage, graphiql: graphiql?.options ?? false },
  });
  const { yoga, pipeline } = served;

  const trackingPage = config.trackingPage
    ? createTrackingPage({ graphqlPath: '/graphql', sandboxKey, graphiql: config.graphql.introspection, logger })
    : undefined;
  const http = await openFrontDoor({
    config,
    logger,
    yoga,
    pipeline,
    clientTokens,
    limits,
    upstream,
    readiness,
    receiver,
    metrics,
    graphiql,
    trackingPage,
    directHttpPath: options.directHttpPath ?? true,
  });
  // With WEBHOOKS=off the sandbox sends none: the facade polls it, as it would an upstream with no URL on file.
  sandbox?.setWebhookUrl(receiver ? http.webhookUrl : undefined);

  // Graceful stop: readiness fails first so a load balancer drains us, then the
  // front door closes (see FrontDoor.close); then the rest, newest first.
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      readiness.stop();
      await http.close();
      await teardown.run(logger);
    })());

  return {
    url: http.url,
    port: http.port,
    webhookUrl: http.webhookUrl,
    metricsUrl: http.metricsUrl,
    server: http.server,
    services,
    yoga,
    pipeline,
    receiver,
    sandbox,
    logger,
    metrics,
    stop,
  };
}
