// The front door: every way in passes through here (the direct JSON path and
// yoga's handler, SSE, WebSocket upgrades, webhooks, probes, metrics, GraphiQL
// and the tracking page). Here, and only here, each request gets its id, its
// CORS headers, its access-log line and the servers' limits, before a path is
// chosen. Behind the listening sockets (front.ts) are up to three HTTP servers:
// the public one with Node's 16 KiB header limit, the webhook one whose limit
// fits the largest webhook token, and, with METRICS_PORT, one for /metrics alone.
import cluster from 'node:cluster';
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Server as NetServer, Socket } from 'node:net';
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
import { createFronts, takeHandedConnections } from './front.js';
import { applyServerLimits, DEFAULT_HEADER_BYTES, defaultMaxConnections, headBytes, refuseConnection, serverOptions, webhookHeaderBytes } from './server-limits.js';
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
  /** The public HTTP server (GraphQL, WebSockets, probes, pages); it is handed its connections, it does not listen itself. */
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
  return (authorization) => timingSafeEqual(createHash('sha256').update(bearerCredential(authorization) ?? '').digest(), expected);
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
    { yoga, pipeline: options.pipeline, clientTokens: options.clientTokens, limits: options.limits, trustProxyHops: config.server.trustProxyHops },
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
  const events = { source: receiver ? 'webhooks' : 'polling', reconcileIntervalMs: config.realtime.reconcileIntervalMs };

  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const receive = (req: IncomingMessage, res: ServerResponse) => {
    if (receiver) return receiver.handle(req, res);
    json(res, 503, { error: 'webhooks_not_configured', message: 'Set WEBHOOK_PUBLIC_KEY_FILE and WEBHOOK_ISSUER to receive webhooks.' });
  };

  const metricsAllowed = config.metricsAccess.token === undefined ? () => true : bearerCheck(config.metricsAccess.token);
  const serveMetrics = (req: IncomingMessage, res: ServerResponse, served: Metrics) => {
    if (!metricsAllowed(req.headers.authorization)) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer realm="metrics"' });
      res.end('{"error":"unauthorized","message":"GET /metrics needs Authorization: Bearer <METRICS_TOKEN>."}');
      return;
    }
    served.handle(req, res);
  };

  const notFound = (res: ServerResponse, pathname: string) => json(res, 404, { error: 'not_found', message: `Nothing at ${pathname}. GraphQL is at /graphql.` });

  /** Every path of the main port. */
  const routePublic: Route = (req, res, pathname) => {
    if (options.graphiql?.handle(req, res, pathname)) return;
    if (pathname === '/graphql') return graphqlHttp(req, res);
    if (pathname === config.webhook.path) {
      if (webhooksOnMainPort) return receive(req, res);
      return json(res, 404, { error: 'not_found', message: 'Webhooks are received on their own port (WEBHOOK_PORT).' });
    }
    // With WORKERS, which worker answered (the cluster hands each connection to one).
    if (pathname === '/health') return json(res, 200, { status: 'ok', ...(cluster.worker ? { worker: cluster.worker.id } : {}), events });
    if (pathname === '/ready') return readiness.handle(res, draining);
    if (pathname === '/metrics' && metrics && config.metricsAccess.onMainPort) return serveMetrics(req, res, metrics);
    if (options.trackingPage?.handle(req, res, pathname)) return;
    notFound(res, pathname);
  };

  /** A connection whose first request was for the webhook path (main port): the one server with the raised header limit. */
  const routeWebhookConnection: Route = (req, res, pathname) => {
    if (pathname === config.webhook.path) return receive(req, res);
    // A proxy or a keep-alive client may send any path on any connection: another path gets the main port's
    // header limit and answer, then the connection closes, so that the next request is routed by its own path.
    res.setHeader('connection', 'close');
    if (headBytes(req) > DEFAULT_HEADER_BYTES) {
      logger.warn({ status: 431, path: pathname, reason: 'headers over the default limit' }, 'request refused by the HTTP server');
      return json(res, 431, { error: 'headers_too_large', message: `Headers are limited to ${DEFAULT_HEADER_BYTES} bytes outside ${config.webhook.path}.` });
    }
    routePublic(req, res, pathname);
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

  // Each webhook's line is at debug outside production: a delivery sends dozens, and a terminal's banner should stay on screen.
  const quiet = (pathname: string) => QUIET_PATHS.has(pathname) || (!config.production && pathname === config.webhook.path);
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
          ...(info.operationName !== undefined || info.operationType !== undefined ? { operation: info.operationName ?? null, operationType: info.operationType } : {}),
          // A GraphQL refusal is often HTTP 200: its codes say what the status does not.
          ...(info.errorCodes ? { errorCodes: info.errorCodes } : {}),
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
    // CORS before any path is chosen, so every answer carries it (a preflight is answered here); never /metrics, which no page may read.
    const preflight = pathname !== '/metrics' && cors.handle(req, res);
    if (logRequests) logWhenDone(req, res, pathname, info);
    if (preflight) return;
    if (debug) return requestScope.run(info, route, req, res, pathname);
    route(req, res, pathname);
  };

  /** A request a server refused itself; on a webhook connection one whose line the parser no longer held is taken for a webhook. */
  const refusedBy = (webhookConnections: boolean) => (status: number, path: string | undefined, reason: string) => {
    const target = path ?? (webhookConnections ? config.webhook.path : undefined);
    if (target === config.webhook.path && receiver && (webhookConnections || webhooksOnMainPort)) return receiver.countRefusal(status, reason);
    logger.warn({ status, path: target, reason }, 'request refused by the HTTP server');
  };

  // Node's 16 KiB header limit for everything but webhook connections, whose limit fits the largest token (it travels in Authorization).
  const limits = { ...config.server, maxTokenBytes: config.webhook.maxTokenBytes };
  const server = createServer(serverOptions(limits, DEFAULT_HEADER_BYTES), handler(routePublic));
  const webhookServer = createServer(serverOptions(limits, webhookHeaderBytes(limits)), handler(webhooksOnMainPort ? routeWebhookConnection : routeWebhookPort));
  const metricsServer = metrics && config.metricsAccess.port !== undefined ? createServer(serverOptions(limits, DEFAULT_HEADER_BYTES), handler(routeMetricsPort)) : undefined;
  const servers = metricsServer ? [server, webhookServer, metricsServer] : [server, webhookServer];
  for (const each of servers) {
    each.keepAliveTimeout = 65_000;
    takeHandedConnections(each);
  }
  applyServerLimits(server, limits, refusedBy(false));
  applyServerLimits(webhookServer, limits, refusedBy(true));
  if (metricsServer) applyServerLimits(metricsServer, limits, refusedBy(false));
  // A WebSocket asked for on a webhook connection is the main server's, within its header limit.
  if (webhooksOnMainPort) {
    webhookServer.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      if (headBytes(req) <= DEFAULT_HEADER_BYTES) return void server.emit('upgrade', req, socket, head);
      logger.warn({ status: 431, path: (req.url ?? '/').split('?', 1)[0], reason: 'headers over the default limit' }, 'request refused by the HTTP server');
      refuseConnection(socket, 431, 'Request Header Fields Too Large');
    });
  }

  // The connection cap counts every listener's connections together.
  const fronts = createFronts({
    maxConnections: limits.maxConnections ?? defaultMaxConnections(),
    headersTimeoutMs: limits.headersTimeoutMs,
    onRefusal: (status, reason) => logger.warn({ status, reason }, 'request refused by the HTTP server'),
    onListenerError: (error) => logger.error({ err: error }, 'a listener could not accept a connection'),
  });
  let main: NetServer;
  let webhookListener: NetServer | undefined;
  let metricsListener: NetServer | undefined;
  try {
    // The main port reads each connection's first request line to tell webhook connections from the rest.
    main = await fronts.listen(config.port, config.host, webhooksOnMainPort ? (path) => (path === config.webhook.path ? webhookServer : server) : server);
    if (!webhooksOnMainPort) webhookListener = await fronts.listen(config.webhook.port!, config.host, webhookServer);
    if (metricsServer) metricsListener = await fronts.listen(config.metricsAccess.port!, config.metricsAccess.host, metricsServer);
  } catch (error) {
    // One port busy: the ones already listening close, so a failed start holds none.
    await fronts.close();
    for (const each of servers) each.close();
    throw error;
  }
  // WebSocket upgrades come through the same door: an id and a log line like any request (CORS is the socket's allowOrigin).
  server.on('upgrade', (req: IncomingMessage) => {
    const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
    attachRequestInfo(req, info);
    if (logRequests) logger.info({ reqId: info.id, method: req.method, path: (req.url ?? '/').split('?', 1)[0], upgrade: req.headers.upgrade }, 'upgrade');
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
    },
    { maxSubscriptions: config.realtime.maxSubscriptionsPerSocket, allowOrigin: cors.allows },
  );
  const url = urlOf(main, config.host);
  const webhookUrl = `${webhookListener ? urlOf(webhookListener, config.host) : url}${config.webhook.path}`;
  const metricsUrl = metricsListener ? `${urlOf(metricsListener, config.metricsAccess.host)}/metrics` : metrics && config.metricsAccess.onMainPort ? `${url}/metrics` : undefined;

  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      draining = true;
      await ws.close();
      const closed = fronts.close();
      for (const each of servers) each.closeIdleConnections();
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
