// The front door: every way in passes through here (the direct JSON path and
// yoga's handler, SSE, WebSocket upgrades, webhooks, probes, metrics, GraphiQL
// and the tracking page). Here, and only here, each request gets its id, its
// CORS headers, its access-log line and the servers' limits, before a path is
// chosen. Behind the listening sockets (front.ts: the connection caps, decided
// before a byte is read) are up to three HTTP servers, each reading its sockets
// with Node's own parser: the public one, with WEBHOOK_PORT one for webhooks
// alone, and with METRICS_PORT one for /metrics. A server whose parser takes
// webhook-sized heads holds every other path to 16 KiB on each parsed request.
import cluster from 'node:cluster';
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Server as NetServer, Socket } from 'node:net';
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
import { createCors, type Cors } from './cors.js';
import { createGraphQLHttpHandler } from './graphql.js';
import type { Readiness } from './readiness.js';
import { createFronts, takeHandedConnections, type ConnectionRefusal, type Fronts } from './front.js';
import {
  afterAnswers,
  applyServerLimits,
  connectionCaps,
  DEFAULT_HEADER_BYTES,
  headOver,
  refuseConnection,
  serverOptions,
  webhookHeaderBytes,
  type ConnectionCaps,
  type Refusal,
  type ServerLimits,
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

/** What the request handler of each server knows of it. */
interface ServerSpec {
  /** The listener in front of it: main, webhook, metrics. */
  name: string;
  /** Its parser takes webhook-sized heads: every other path is held to Node's default on each parsed head. */
  boundsHeads: boolean;
}

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

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
};

/** The paths of each port: the main one, WEBHOOK_PORT's and METRICS_PORT's. */
function createRoutes(options: FrontDoorOptions, draining: () => boolean) {
  const { config, readiness, receiver, metrics } = options;
  // Over SSE a subscriber may leave about 1 KiB per allowed pending event unread before it is cut off.
  const graphqlHttp = createGraphQLHttpHandler(
    {
      yoga: options.yoga,
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
  // Without WEBHOOK_PORT, webhooks come in on the main port.
  const webhooksOnMainPort = config.webhook.port === undefined;
  // How subscriptions learn of changes: webhooks (with reads when none come), or reads of the upstream alone.
  const events = {
    source: receiver ? 'webhooks' : 'polling',
    reconcileIntervalMs: config.realtime.reconcileIntervalMs,
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

  /** Every path of the main port. */
  const main: Route = (req, res, pathname) => {
    if (options.graphiql?.handle(req, res, pathname)) return;
    if (pathname === '/graphql') return graphqlHttp(req, res);
    if (pathname === config.webhook.path) {
      if (webhooksOnMainPort) return receive(req, res);
      return json(res, 404, { error: 'not_found', message: 'Webhooks are received on their own port (WEBHOOK_PORT).' });
    }
    // With WORKERS, which worker answered (the cluster hands each connection to one).
    if (pathname === '/health')
      return json(res, 200, { status: 'ok', ...(cluster.worker ? { worker: cluster.worker.id } : {}), events });
    if (pathname === '/ready') return readiness.handle(res, draining());
    if (pathname === '/metrics' && metrics && config.metricsAccess.onMainPort) return serveMetrics(req, res, metrics);
    if (options.trackingPage?.handle(req, res, pathname)) return;
    json(res, 404, { error: 'not_found', message: `Nothing at ${pathname}. GraphQL is at /graphql.` });
  };

  /** WEBHOOK_PORT: the webhook path alone. */
  const webhook: Route = (req, res, pathname) => {
    if (pathname === config.webhook.path) return receive(req, res);
    json(res, 404, { error: 'not_found', message: `This port receives webhooks only, at ${config.webhook.path}.` });
  };

  /** METRICS_PORT: /metrics alone. */
  const metricsPort: Route = (req, res, pathname) => {
    if (pathname === '/metrics' && metrics) return serveMetrics(req, res, metrics);
    json(res, 404, { error: 'not_found', message: 'This port serves /metrics only.' });
  };

  return { main, webhook, metrics: metricsPort };
}

/** Logs a request's line once its answer is done (or the client went away). */
function logWhenDone(
  logger: Logger,
  quiet: (pathname: string) => boolean,
  req: IncomingMessage,
  res: ServerResponse,
  pathname: string,
  info: RequestInfo,
): void {
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
}

const HEAD_TOO_LARGE: Refusal = { status: 431, text: 'Request Header Fields Too Large' };

/** node:http's answer being written on a socket, and whether the connection closes after it. */
interface ServedSocket extends Socket {
  _httpMessage?: { _last?: boolean } | null;
}

/**
 * What the door makes of a request before it runs: nothing (it runs), 'serve-once' (it runs, then its connection
 * closes), a refusal (the first on its connection), or 'unanswered' (behind a refusal, or an answer that closes the
 * connection: it would never be answered, so it never runs).
 */
type Verdict = undefined | 'serve-once' | Refusal | 'unanswered';

/**
 * What every request and upgrade of every server goes through before its route: the limits of its slot and of its
 * head, then its id, CORS and access-log line.
 */
function createDoor(
  { config, logger }: FrontDoorOptions,
  cors: Cors,
  fronts: Fronts,
  refused: (status: number, path: string | undefined, reason: string, listener: string) => void,
  draining: () => boolean,
) {
  // The request id reaches upstream-call logs through an AsyncLocalStorage, entered only when those logs are on.
  const debug = logger.isLevelEnabled('debug');
  const logRequests = logger.isLevelEnabled('info');
  // Each webhook's line is at debug outside production: a delivery sends dozens, and a terminal's banner should stay on
  // screen.
  const quiet = (pathname: string) =>
    QUIET_PATHS.has(pathname) || (!config.production && pathname === config.webhook.path);
  // Once a request on a connection is refused, the connection closes after its answer: the requests pipelined behind
  // it never run.
  const refusedSockets = new WeakSet<Socket>();

  const verdictOf = (req: IncomingMessage, pathname: string, server: ServerSpec): Verdict => {
    const socket = req.socket;
    // An earlier answer closes the connection (a refusal, or node:http's own 400 to a request without Host).
    if (refusedSockets.has(socket) || !socket.writable || (socket as ServedSocket)._httpMessage?._last)
      return 'unanswered';
    const verdict = fronts.slotVerdict(socket, pathname);
    if (verdict === 'serve-once') return verdict;
    let refusal = verdict === 'serve' ? undefined : verdict;
    if (!refusal && server.boundsHeads && pathname !== config.webhook.path && headOver(req, DEFAULT_HEADER_BYTES)) {
      refusal = HEAD_TOO_LARGE;
      refused(431, pathname, `headers over ${DEFAULT_HEADER_BYTES} bytes`, server.name);
    }
    if (refusal) refusedSockets.add(socket);
    return refusal;
  };

  /** Each request of a server; one that expects 100-continue (checkContinue) is asked for its body once it passed. */
  const handler =
    (route: Route, server: ServerSpec, continued = false) =>
    (req: IncomingMessage, res: ServerResponse) => {
      const pathname = (req.url ?? '/').split('?', 1)[0]!;
      const verdict = verdictOf(req, pathname, server);
      if (verdict === 'serve-once') res.setHeader('connection', 'close');
      else if (verdict) {
        // Its body is read and dropped; its refusal is written after the answers before it, and the connection ends.
        req.resume();
        if (verdict !== 'unanswered') afterAnswers(req.socket, () => refuseConnection(req.socket, verdict), res);
        return;
      }
      if (continued) res.writeContinue();
      // Every request gets an id (the caller's x-request-id when it is a plain token), echoed in the response.
      const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
      attachRequestInfo(req, info);
      res.setHeader('x-request-id', info.id);
      // While stopping, each keep-alive connection closes after its answer: the upstream's
      // webhook sender (and any client) would otherwise keep it busy until the grace period ends.
      if (draining()) res.setHeader('connection', 'close');
      // CORS before any path is chosen, so every answer carries it (a preflight is answered here); never /metrics,
      // which no page may read.
      const preflight = pathname !== '/metrics' && cors.handle(req, res);
      if (logRequests) logWhenDone(logger, quiet, req, res, pathname, info);
      if (preflight) return;
      if (debug) return requestScope.run(info, route, req, res, pathname);
      route(req, res, pathname);
    };

  /**
   * WebSocket upgrades come through the same door: the limits of their slot and head, an id and a log line (CORS is
   * the socket's allowOrigin). The WebSocket server's own upgrade listeners are called here, once those pass.
   */
  const guardUpgrades = (server: Server, spec: ServerSpec) => {
    const accepted = server.listeners('upgrade') as Array<(req: IncomingMessage, socket: Socket, head: Buffer) => void>;
    server.removeAllListeners('upgrade');
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      const pathname = (req.url ?? '/').split('?', 1)[0]!;
      const verdict = verdictOf(req, pathname, spec);
      if (verdict === 'unanswered') return afterAnswers(socket, () => socket.destroy());
      if (verdict && verdict !== 'serve-once') return afterAnswers(socket, () => refuseConnection(socket, verdict));
      const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
      attachRequestInfo(req, info);
      if (logRequests)
        logger.info({ reqId: info.id, method: req.method, path: pathname, upgrade: req.headers.upgrade }, 'upgrade');
      for (const listener of accepted) listener.call(server, req, socket, head);
    });
  };

  return { handler, guardUpgrades };
}

/** The HTTP servers behind the listeners, each with its parser's header limit, deadlines and refusals. */
function createServers(
  options: FrontDoorOptions,
  limits: ServerLimits,
  handler: (
    route: Route,
    server: ServerSpec,
    continued?: boolean,
  ) => (req: IncomingMessage, res: ServerResponse) => void,
  routes: ReturnType<typeof createRoutes>,
  refused: (status: number, path: string | undefined, reason: string, listener: string) => void,
) {
  const { config, metrics } = options;
  const webhooksOnMainPort = config.webhook.port === undefined;
  const webhookHead = webhookHeaderBytes(limits);
  // Each server by the name of the listener in front of it, with its parser's header limit and its routes.
  const specs: Array<[string, number, Route]> = [
    ['main', webhooksOnMainPort ? webhookHead : DEFAULT_HEADER_BYTES, routes.main],
  ];
  if (!webhooksOnMainPort) specs.push(['webhook', webhookHead, routes.webhook]);
  if (metrics && config.metricsAccess.port !== undefined) specs.push(['metrics', DEFAULT_HEADER_BYTES, routes.metrics]);
  const named = new Map<string, { server: Server; spec: ServerSpec }>();
  for (const [name, maxHeaderSize, route] of specs) {
    const spec: ServerSpec = { name, boundsHeads: maxHeaderSize > DEFAULT_HEADER_BYTES };
    const server = createServer(serverOptions(limits, maxHeaderSize), handler(route, spec));
    // A refused request is answered before its client is told to send the body.
    server.on('checkContinue', handler(route, spec, true));
    takeHandedConnections(server);
    applyServerLimits(server, limits, (status, path, reason) => refused(status, path, reason, name));
    named.set(name, { server, spec });
  }
  return named;
}

/** Listens on every port; one port busy: the ones already listening close, so a failed start holds none. */
async function listenAll(
  config: Config,
  fronts: Fronts,
  servers: Map<string, { server: Server }>,
  caps: ConnectionCaps,
) {
  const webhooksOnMainPort = config.webhook.port === undefined;
  const main = servers.get('main')!.server;
  const webhook = servers.get('webhook')?.server;
  const metrics = servers.get('metrics')?.server;
  try {
    // Webhooks get slots no other client takes: WEBHOOK_PORT's own, or on a shared port those past the rest, for the
    // webhook path only.
    const mainListener = await fronts.listen(config.port, config.host, {
      name: 'main',
      server: main,
      perAddress: caps.perAddress,
      ...(webhooksOnMainPort ? { reservedSlots: caps.webhookSlots, reservedFor: config.webhook.path } : {}),
    });
    const webhookListener = webhook
      ? await fronts.listen(config.webhook.port!, config.host, {
          name: 'webhook',
          server: webhook,
          reservedSlots: caps.webhookSlots,
        })
      : undefined;
    const metricsListener = metrics
      ? await fronts.listen(config.metricsAccess.port!, config.metricsAccess.host, { name: 'metrics', server: metrics })
      : undefined;
    return { mainListener, webhookListener, metricsListener };
  } catch (error) {
    await fronts.close();
    for (const { server } of servers.values()) server.close();
    throw error;
  }
}

/** The limits of the HTTP servers, from the configuration. */
function serverLimitsOf(config: Config): ServerLimits {
  return { ...config.server, maxTokenBytes: config.webhook.maxTokenBytes };
}

/**
 * A request refused by a server's parser or by the door: a webhook's, where webhooks are received, is counted as the
 * receiver's refusals are. A refusal whose path is unknown (the parser read its request line in an earlier read) is a
 * webhook's on WEBHOOK_PORT, and on a shared port when its head passed the parser's webhook-sized limit (431).
 */
function refusalCounter(config: Config, logger: Logger, receiver: WebhookReceiver | undefined) {
  const receivingOn = config.webhook.port === undefined ? 'main' : 'webhook';
  return (status: number, path: string | undefined, reason: string, listener: string) => {
    const webhooks =
      listener === receivingOn &&
      (path === config.webhook.path || (path === undefined && (listener === 'webhook' || status === 431)));
    if (webhooks && receiver) return receiver.countRefusal(status, reason);
    logger.warn({ status, path, reason, listener }, 'request refused by the HTTP server');
  };
}

export async function openFrontDoor(options: FrontDoorOptions): Promise<FrontDoor> {
  const { config, logger, metrics } = options;
  let draining = false;
  const isDraining = () => draining;
  const cors = createCors(config.corsOrigins);
  const limits = serverLimitsOf(config);
  const caps = connectionCaps(limits);
  const refused = refusalCounter(config, logger, options.receiver);
  const fronts = createFronts({
    maxConnections: caps.maxConnections,
    onConnectionRefused: connectionRefusalLog(logger),
    onListenerError: (error) => logger.error({ err: error }, 'a listener could not accept a connection'),
  });
  const door = createDoor(options, cors, fronts, refused, isDraining);
  const routes = createRoutes(options, isDraining);
  const named = createServers(options, limits, door.handler, routes, refused);
  const servers = [...named.values()].map(({ server }) => server);
  if (metrics) registerConnectionMetrics(metrics.registry, fronts);
  const { mainListener, webhookListener, metricsListener } = await listenAll(config, fronts, named, caps);

  const { server, spec } = named.get('main')!;
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
  door.guardUpgrades(server, spec);
  const url = urlOf(mainListener, config.host);
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

  return { server, url, port: (mainListener.address() as AddressInfo).port, webhookUrl, metricsUrl, close };
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
    help: 'Connections refused, by reason: per_address (MAX_CONNECTIONS_PER_ADDRESS, 429), max_connections (every slot taken, 503), webhook_slots (on a slot kept for webhooks, a request that is not its one webhook request, 503)',
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [reason, count] of Object.entries(fronts.refusals)) this.inc({ reason }, count);
    },
  });
}
