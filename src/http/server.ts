// The front door: every way in passes through here (the direct JSON path and
// yoga's handler, SSE, WebSocket upgrades, webhooks, probes, metrics, GraphiQL
// and the tracking page). Here, and only here, each request gets its id, its
// CORS headers, its access-log line and the servers' limits, before a path is
// chosen. Behind the listening sockets (front.ts, which caps connections and
// holds each request's head to its path's limit: Node's 16 KiB, or for webhooks
// one that fits the largest token) are up to three HTTP servers: the public one,
// with WEBHOOK_PORT one for webhooks alone, and with METRICS_PORT one for /metrics.
import cluster from 'node:cluster';
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Server as NetServer } from 'node:net';
import { Counter, Gauge } from 'prom-client';
import { bearerCredential } from '../access/caller.js';
import type { Config } from '../config.js';
import type { ClientTokens } from '../access/client-tokens.js';
import type { RequestLimits } from '../access/rate-limit.js';
import type { Pipeline } from '../pipeline/pipeline.js';
import type { GraphQLServer } from '../pipeline/yoga.js';
import type { Upstream } from '../upstream/clients.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../observability/metrics.js';
import { attachRequestInfo, requestId, requestScope, type RequestInfo } from '../observability/request.js';
import type { WebhookReceiver } from '../webhooks/receiver.js';
import { createCors } from './cors.js';
import { createGraphQLHttpHandler } from './graphql.js';
import type { Readiness } from './readiness.js';
import { createFronts, takeHandedConnections, type ConnectionRefusal, type Fronts } from './front.js';
import {
  applyServerLimits,
  connectionCaps,
  DEFAULT_HEADER_BYTES,
  serverOptions,
  webhookHeaderBytes,
} from './server-limits.js';
import { attachGraphQLWebSocket } from './ws.js';

/** A part that answers some paths itself (GraphiQL, the tracking page): true when it did. */
export interface PathHandler {
  handle(req: IncomingMessage, res: ServerResponse, pathname: string): boolean;
}

export interface FrontDoorOptions {
  config: Config;
  logger: Logger;
  yoga: GraphQLServer;
  /** The pipeline every GraphQL operation runs through, whichever transport brought it. */
  pipeline: Pipeline;
  clientTokens: ClientTokens;
  limits: RequestLimits;
  upstream: Upstream;
  readiness: Readiness;
  receiver: WebhookReceiver | undefined;
  metrics: Metrics | undefined;
  /** GraphiQL: its page (served at /graphql to browsers, so it comes first) and assets; undefined when off. */
  graphiql: PathHandler | undefined;
  /** The tracking page at / and its assets; undefined when off. */
  trackingPage: PathHandler | undefined;
  /** false: every GraphQL HTTP request goes through yoga's handler (tests compare both paths). */
  directHttpPath: boolean;
}

export interface FrontDoor {
  /**
   * The public HTTP server (GraphQL, WebSockets, probes, pages); it is handed its connections, it does not listen
   * itself.
   */
  server: Server;
  /** Base URL, e.g. http://127.0.0.1:4000 */
  url: string;
  port: number;
  /** Where webhooks are received: on the main port, or on WEBHOOK_PORT. */
  webhookUrl: string;
  /** Where /metrics is served, when it is (METRICS_PORT, or the main port). */
  metricsUrl: string | undefined;
  /**
   * Graceful stop: /ready fails at once, WebSockets close with 1001, keep-alive
   * connections close after their answer, in-flight requests get SHUTDOWN_GRACE_MS.
   */
  close(): Promise<void>;
}

/** Probes and scrapes log at debug, everything else at info (webhooks: see quiet below). */
const QUIET_PATHS = new Set(['/health', '/ready', '/metrics']);

type Route = (req: IncomingMessage, res: ServerResponse, pathname: string) => void;

/** Checks `Authorization: Bearer <token>` against METRICS_TOKEN in the same time whatever was sent. */
function bearerCheck(token: string): (authorization: string | undefined) => boolean {
  const expected = createHash('sha256').update(token).digest();
  // Digests are of one length: timingSafeEqual neither throws nor tells how long the token is.
  return (authorization) =>
    timingSafeEqual(
      createHash('sha256')
        .update(bearerCredential(authorization) ?? '')
        .digest(),
      expected,
    );
}

/** http://host:port of a listener, with the loopback address for "any". */
function urlOf(listener: NetServer, host: string): string {
  const { port } = listener.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host;
  return `http://${shown === '0.0.0.0' ? '127.0.0.1' : shown}:${port}`;
}

export async function openFrontDoor(options: FrontDoorOptions): Promise<FrontDoor> {
  const { config, logger, yoga, readiness, receiver, metrics } = options;
  const cors = createCors(config.corsOrigins);
  // Over SSE a subscriber may leave about 1 KiB per allowed pending event unread before it is cut off.
  const graphqlHttp = createGraphQLHttpHandler(
    {
      yoga,
      pipeline: options.pipeline,
      clientTokens: options.clientTokens,
      limits: options.limits,
      upstream: options.upstream,
      trustProxyHops: config.server.trustProxyHops,
    },
    {
      maxBodyBytes: config.graphql.maxBodyBytes,
      maxResponseBytes: config.graphql.maxResponseBytes,
      maxDocumentBytes: config.graphql.maxDocumentBytes,
      maxSseBufferedBytes: config.realtime.maxPendingEvents * 1024,
      direct: options.directHttpPath,
    },
  );
  // The request id reaches upstream-call logs through an AsyncLocalStorage, entered only when those logs are on.
  const debug = logger.isLevelEnabled('debug');
  const logRequests = logger.isLevelEnabled('info');
  // Without WEBHOOK_PORT, webhooks come in on the main port.
  const webhooksOnMainPort = config.webhook.port === undefined;
  let draining = false;
  // How subscriptions learn of changes: webhooks (with reads when none come), or reads of the upstream alone.
  const events = {
    source: receiver ? 'webhooks' : 'polling',
    reconcileIntervalMs: config.realtime.reconcileIntervalMs,
  };

  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const receive = (req: IncomingMessage, res: ServerResponse) => {
    if (receiver) return receiver.handle(req, res);
    json(res, 503, {
      error: 'webhooks_not_configured',
      message: 'Set WEBHOOK_PUBLIC_KEY_FILE and WEBHOOK_ISSUER to receive webhooks.',
    });
  };

  const metricsAllowed =
    config.metricsAccess.token === undefined ? () => true : bearerCheck(config.metricsAccess.token);
  const serveMetrics = (req: IncomingMessage, res: ServerResponse, served: Metrics) => {
    if (!metricsAllowed(req.headers.authorization)) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer realm="metrics"' });
      res.end('{"error":"unauthorized","message":"GET /metrics needs Authorization: Bearer <METRICS_TOKEN>."}');
      return;
    }
    served.handle(req, res);
  };

  const notFound = (res: ServerResponse, pathname: string) =>
    json(res, 404, { error: 'not_found', message: `Nothing at ${pathname}. GraphQL is at /graphql.` });

  /** Every path of the main port. */
  const routePublic: Route = (req, res, pathname) => {
    if (options.graphiql?.handle(req, res, pathname)) return;
    if (pathname === '/graphql') return graphqlHttp(req, res);
    if (pathname === config.webhook.path) {
      if (webhooksOnMainPort) return receive(req, res);
      return json(res, 404, { error: 'not_found', message: 'Webhooks are received on their own port (WEBHOOK_PORT).' });
    }
    // With WORKERS, which worker answered (the cluster hands each connection to one).
    if (pathname === '/health')
      return json(res, 200, { status: 'ok', ...(cluster.worker ? { worker: cluster.worker.id } : {}), events });
    if (pathname === '/ready') return readiness.handle(res, draining);
    if (pathname === '/metrics' && metrics && config.metricsAccess.onMainPort) return serveMetrics(req, res, metrics);
    if (options.trackingPage?.handle(req, res, pathname)) return;
    notFound(res, pathname);
  };

  /** WEBHOOK_PORT: the webhook path alone. */
  const routeWebhookPort: Route = (req, res, pathname) => {
    if (pathname === config.webhook.path) return receive(req, res);
    json(res, 404, { error: 'not_found', message: `This port receives webhooks only, at ${config.webhook.path}.` });
  };

  /** METRICS_PORT: /metrics alone. */
  const routeMetricsPort: Route = (req, res, pathname) => {
    if (pathname === '/metrics' && metrics) return serveMetrics(req, res, metrics);
    json(res, 404, { error: 'not_found', message: 'This port serves /metrics only.' });
  };

  // Each webhook's line is at debug outside production: a delivery sends dozens, and a terminal's banner should stay on
  // screen.
  const quiet = (pathname: string) =>
    QUIET_PATHS.has(pathname) || (!config.production && pathname === config.webhook.path);
  const logWhenDone = (req: IncomingMessage, res: ServerResponse, pathname: string, info: RequestInfo) => {
    const started = performance.now();
    res.once('close', () => {
      logger[quiet(pathname) ? 'debug' : 'info'](
        {
          reqId: info.id,
          method: req.method,
          path: pathname,
          status: res.statusCode,
          durationMs: Math.round((performance.now() - started) * 1000) / 1000,
          ...(info.operationName !== undefined || info.operationType !== undefined
            ? { operation: info.operationName ?? null, operationType: info.operationType }
            : {}),
          // A GraphQL refusal is often HTTP 200: its codes say what the status does not.
          ...(info.errorCodes ? { errorCodes: info.errorCodes } : {}),
          ...(info.result ? { result: info.result } : {}),
          ...(res.writableFinished ? {} : { aborted: true }),
        },
        'request',
      );
    });
  };

  /** What every request of every server goes through before its route. */
  const handler = (route: Route) => (req: IncomingMessage, res: ServerResponse) => {
    const pathname = (req.url ?? '/').split('?', 1)[0]!;
    // Every request gets an id (the caller's x-request-id when it is a plain token), echoed in the response.
    const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
    attachRequestInfo(req, info);
    res.setHeader('x-request-id', info.id);
    // While stopping, each keep-alive connection closes after its answer: the upstream's
    // webhook sender (and any client) would otherwise keep it busy until the grace period ends.
    if (draining) res.setHeader('connection', 'close');
    // CORS before any path is chosen, so every answer carries it (a preflight is answered here); never /metrics, which
    // no page may read.
    const preflight = pathname !== '/metrics' && cors.handle(req, res);
    if (logRequests) logWhenDone(req, res, pathname, info);
    if (preflight) return;
    if (debug) return requestScope.run(info, route, req, res, pathname);
    route(req, res, pathname);
  };

  /**
   * A request refused before it was answered (by the front or a server's parser): a webhook's, where webhooks are
   * received, is counted as the receiver's refusals are.
   */
  const refused = (status: number, path: string | undefined, reason: string, listener: string) => {
    const receiving = listener === (webhooksOnMainPort ? 'main' : 'webhook');
    if (path === config.webhook.path && receiving && receiver) return receiver.countRefusal(status, reason);
    logger.warn({ status, path, reason, listener }, 'request refused by the HTTP server');
  };

  // Every head is held to its path's limit by the front: 16 KiB, the webhook path's (where webhooks are received) the
  // largest token's.
  const limits = { ...config.server, maxTokenBytes: config.webhook.maxTokenBytes };
  const webhookHead = webhookHeaderBytes(limits);
  const headLimit = (path: string | undefined) => (path === config.webhook.path ? webhookHead : DEFAULT_HEADER_BYTES);
  const defaultHead = () => DEFAULT_HEADER_BYTES;
  const server = createServer(
    serverOptions(limits, webhooksOnMainPort ? webhookHead : DEFAULT_HEADER_BYTES),
    handler(routePublic),
  );
  const webhookServer = webhooksOnMainPort
    ? undefined
    : createServer(serverOptions(limits, webhookHead), handler(routeWebhookPort));
  const metricsServer =
    metrics && config.metricsAccess.port !== undefined
      ? createServer(serverOptions(limits, DEFAULT_HEADER_BYTES), handler(routeMetricsPort))
      : undefined;
  // Each server by the name of the listener in front of it.
  const named = new Map<string, Server>([['main', server]]);
  if (webhookServer) named.set('webhook', webhookServer);
  if (metricsServer) named.set('metrics', metricsServer);
  const servers = [...named.values()];
  const caps = connectionCaps(limits);
  const fronts = createFronts({
    maxConnections: caps.maxConnections,
    headersTimeoutMs: limits.headersTimeoutMs,
    defaultHeadBytes: DEFAULT_HEADER_BYTES,
    onRefusal: refused,
    onConnectionRefused: connectionRefusalLog(logger),
    onListenerError: (error) => logger.error({ err: error }, 'a listener could not accept a connection'),
    onFault: (error) => logger.error({ err: error }, "a connection's requests could not be read; it was closed"),
  });
  for (const [name, each] of named) {
    each.keepAliveTimeout = 65_000;
    takeHandedConnections(each);
    applyServerLimits(
      each,
      limits,
      (status, path, reason) => refused(status, path, reason, name),
      (socket) => fronts.headOf(socket),
    );
  }
  if (metrics) registerConnectionMetrics(metrics.registry, fronts);

  let main: NetServer;
  let webhookListener: NetServer | undefined;
  let metricsListener: NetServer | undefined;
  try {
    // Webhooks get slots no other client takes: WEBHOOK_PORT's own, or on a shared port those past the rest, for the
    // webhook path only.
    main = await fronts.listen(config.port, config.host, {
      name: 'main',
      server,
      headLimit: webhooksOnMainPort ? headLimit : defaultHead,
      perAddress: caps.perAddress,
      ...(webhooksOnMainPort ? { reservedSlots: caps.webhookSlots, reservedFor: config.webhook.path } : {}),
    });
    if (webhookServer)
      webhookListener = await fronts.listen(config.webhook.port!, config.host, {
        name: 'webhook',
        server: webhookServer,
        headLimit,
        reservedSlots: caps.webhookSlots,
      });
    if (metricsServer)
      metricsListener = await fronts.listen(config.metricsAccess.port!, config.metricsAccess.host, {
        name: 'metrics',
        server: metricsServer,
        headLimit: defaultHead,
      });
  } catch (error) {
    // One port busy: the ones already listening close, so a failed start holds none.
    await fronts.close();
    for (const each of servers) each.close();
    throw error;
  }
  // WebSocket upgrades come through the same door: an id and a log line like any request (CORS is the socket's
  // allowOrigin).
  server.on('upgrade', (req: IncomingMessage) => {
    const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
    attachRequestInfo(req, info);
    if (logRequests)
      logger.info(
        { reqId: info.id, method: req.method, path: (req.url ?? '/').split('?', 1)[0], upgrade: req.headers.upgrade },
        'upgrade',
      );
  });
  const ws = attachGraphQLWebSocket(
    server,
    {
      pipeline: options.pipeline,
      schema: options.pipeline.documents.schema,
      clientTokens: options.clientTokens,
      limits: options.limits,
      upstream: options.upstream,
      trustProxyHops: config.server.trustProxyHops,
      logger,
    },
    { maxSubscriptions: config.realtime.maxSubscriptionsPerSocket, allowOrigin: cors.allows },
  );
  const url = urlOf(main, config.host);
  const webhookUrl = `${webhookListener ? urlOf(webhookListener, config.host) : url}${config.webhook.path}`;
  const metricsUrl = metricsListener
    ? `${urlOf(metricsListener, config.metricsAccess.host)}/metrics`
    : metrics && config.metricsAccess.onMainPort
      ? `${url}/metrics`
      : undefined;

  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      draining = true;
      await ws.close();
      const closed = fronts.close();
      for (const each of servers) {
        each.closeIdleConnections();
        // An answer begun before the stop carries no `connection: close`: its connection ends as soon as it is sent.
        each.keepAliveTimeout = 1;
      }
      const grace = setTimeout(() => {
        for (const each of servers) each.closeAllConnections();
      }, config.shutdownGraceMs);
      await closed;
      clearTimeout(grace);
      // Ends each server's deadline checks (none of them listens, so there is nothing else to close).
      for (const each of servers) each.close();
    })());

  return { server, url, port: (main.address() as AddressInfo).port, webhookUrl, metricsUrl, close };
}

/**
 * How often a kind of connection refusal is logged at most: a flood of them is one line per interval, with its count.
 */
const REFUSAL_LOG_INTERVAL_MS = 10_000;

/**
 * Logs connection refusals: the first of each kind at once, then at most one line per interval with how many came
 * since.
 */
function connectionRefusalLog(logger: Logger): (reason: ConnectionRefusal, listener: string, detail: string) => void {
  const last = new Map<ConnectionRefusal, { at: number; since: number }>();
  return (reason, listener, detail) => {
    const now = performance.now();
    const seen = last.get(reason);
    if (seen && now - seen.at < REFUSAL_LOG_INTERVAL_MS) return void (seen.since += 1);
    logger.warn({ reason, listener, refused: (seen?.since ?? 0) + 1 }, `connection refused: ${detail}`);
    last.set(reason, { at: now, since: 0 });
  };
}

/** Connections open by listener, and those refused by reason, in /metrics. */
function registerConnectionMetrics(registry: Metrics['registry'], fronts: Fronts): void {
  new Gauge({
    name: 'delivery_graph_open_connections',
    help: 'Connections open now, by listener: main (PORT), webhook (WEBHOOK_PORT), metrics (METRICS_PORT); WebSockets included',
    labelNames: ['listener'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [listener, open] of Object.entries(fronts.openByListener())) this.set({ listener }, open);
    },
  });
  new Counter({
    name: 'delivery_graph_connection_refusals_total',
    help: 'Connections refused before a request was read, by reason: per_address (MAX_CONNECTIONS_PER_ADDRESS, 429), max_connections (every slot taken, 503), webhook_slots (a request other than a webhook on a slot kept for webhooks, 503)',
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [reason, count] of Object.entries(fronts.refusals)) this.inc({ reason }, count);
    },
  });
}
