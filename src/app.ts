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
import { createGraphQLServer, type GraphQLServer, type GraphQLServerOptions } from './pipeline/yoga.js';
import { createReadiness, type Readiness, type ReadinessOptions } from './http/readiness.js';
import { openFrontDoor } from './http/server.js';
import { Teardown } from './lifecycle.js';
import { createLogger, type Logger } from './logger.js';
import type { Metrics } from './observability/metrics.js';
import { operationMetrics } from './observability/operation-metrics.js';
import { requestScope } from './observability/request.js';
import { startConfiguredTracing, startMetrics } from './observability/start.js';
import type { SpanExporterLike } from './observability/tracing.js';
import { openEventBus, startRealtime, type Realtime, type RealtimeDeps } from './realtime/start.js';
import type { Sandbox } from '@delivery-graph/sandbox';
import { openStore, redisOf } from './store/open.js';
import { proofRefreshMs } from './store/retention.js';
import type { Store } from './store/store.js';
import { createUpstream } from './upstream/clients.js';
import { AppendBatcher } from './webhooks/group-commit.js';
import type { WebhookReceiver } from './webhooks/receiver.js';
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
  const store = options.store ?? (await openStore(config, logger));
  teardown.add('store', () => store.close());
  // With no UPSTREAM_URL, the embedded sandbox is the upstream (embedded-sandbox.ts); paused until it knows where
  // webhooks go.
  const sandbox = config.upstream.url ? undefined : await startEmbeddedSandbox(config, logger);
  if (sandbox) teardown.add('sandbox', () => sandbox.stop());

  const tracing = await startConfiguredTracing(config, teardown, options.spanExporter);
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

  const onRead: RealtimeDeps['onRead'] = (kind, delayMs) => metrics?.reconcileRead(kind, delayMs / 1000);
  const { services, realtime, batcher } = await startServices(config, { store, upstream, onRead, logger }, teardown);
  const { bus, owners } = services;
  const receiver = await startWebhooks(config, sandbox, { store, bus, logger, batcher });

  const readiness = await startReadiness(config, { upstream, store, logger }, teardown);
  const persisted = configuredPersistedOperations(config.graphql, redisOf(store), logger);
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
  const observers = [...(metrics ? [operationMetrics(metrics)] : []), ...(tracing ? [tracing.observer] : [])];
  const served = serveGraphQL(config, { services, persisted, observers, logger }, sandbox?.merchants[0]?.key);
  const { yoga, pipeline } = served;

  const http = await openFrontDoor({
    ...served,
    config,
    logger,
    clientTokens: services.clientTokens,
    upstream,
    readiness,
    receiver,
    metrics,
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

  const { url, port, webhookUrl, metricsUrl, server } = http;
  return {
    url,
    port,
    webhookUrl,
    metricsUrl,
    server,
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

/** What every resolver and stream shares: the event bus, merchants and owner records, realtime, client tokens. */
async function startServices(
  config: Config,
  { store, upstream, onRead, logger }: Pick<RealtimeDeps, 'store' | 'upstream' | 'onRead' | 'logger'>,
  teardown: Teardown,
): Promise<{ services: Services; realtime: Realtime; batcher: AppendBatcher }> {
  const bus = await openEventBus(redisOf(store), logger, teardown);
  // Who may see which delivery: one set of merchants and owner records for every path (src/access/owners.ts).
  const merchants = new Merchants(store);
  const readScope = config.upstream.readScope;
  const owners = new Owners(store, { logger, merchants, readScope, proofRefreshMs: proofRefreshMs(config) });
  teardown.add('owner records', () => owners.flush());
  // Webhooks and reconciliation store events through one batcher: one log order, publications in it.
  const batcher = new AppendBatcher(store, bus, (error) => logger.error({ err: error }, 'stored event not published'));
  const append: RealtimeDeps['append'] = (payload, receivedAt, onlyIf) => batcher.appendIf(payload, receivedAt, onlyIf);
  // Reconciliation, key re-confirmation, read access, subscription caps, event pages, fan-out (realtime/start.ts).
  const realtime = startRealtime({ config, store, upstream, bus, merchants, owners, append, onRead, logger }, teardown);
  const clientTokens = new ClientTokens(clientTokenSecrets(config.clientTokenSecrets, config.dataDir));
  const { maxPendingEvents } = config.realtime;
  const shared = { config, upstream, store, bus, owners, merchants, maxPendingEvents, clientTokens };
  return { services: { ...shared, bookingsInFlight: new Map(), ...realtime }, realtime, batcher };
}

/** Readiness, with its first answer about the upstream before serving. */
async function startReadiness(
  config: Config,
  { upstream, store, logger }: Pick<ReadinessOptions, 'upstream' | 'logger'> & { store: Store },
  teardown: Teardown,
): Promise<Readiness> {
  const upstreamCheckMs = config.upstream.healthCheckMs;
  const readiness = createReadiness({ upstream, logger, upstreamCheckMs, checkStore: () => store.ping() });
  teardown.add('readiness', () => readiness.stop());
  // Unless that takes longer than a second: then it is reported when it comes.
  await readiness.firstCheck(1_000);
  return readiness;
}

/** The GraphQL server and its request limits, and the pages that call it (GraphiQL, the tracking page). */
function serveGraphQL(
  config: Config,
  {
    services,
    persisted,
    observers,
    logger,
  }: Pick<GraphQLServerOptions, 'services' | 'persisted' | 'observers' | 'logger'>,
  sandboxKey: string | undefined,
) {
  const introspection = config.graphql.introspection;
  const graphiql = introspection ? createGraphiQL({ graphqlPath: '/graphql', sandboxKey, logger }) : undefined;
  // Per key, per client token and per client address; shared by every instance through the store's Redis when there is
  // one.
  const redis = redisOf(services.store);
  const shared = redis && { client: redis.client, prefix: redis.prefix };
  const limits = createRequestLimits(config, services.upstream.keys, shared, logger);
  const { yoga, pipeline } = createGraphQLServer({
    services,
    logger,
    observers,
    limits,
    persisted,
    graphiql: { renderGraphiQL: renderGraphiQLPage, graphiql: graphiql?.options ?? false },
  });
  const trackingPage = config.trackingPage
    ? createTrackingPage({ graphqlPath: '/graphql', sandboxKey, graphiql: introspection, logger })
    : undefined;
  return { yoga, pipeline, graphiql, limits, trackingPage };
}
