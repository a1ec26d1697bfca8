// The one front door: a single HTTP server through which every way in passes
// (the direct JSON path and yoga's handler, SSE, WebSocket upgrades, webhooks,
// probes, metrics, GraphiQL and the tracking page). Here, and only here, each
// request gets its id, its CORS headers, its access-log line and the server's
// limits, before a path is chosen.
import cluster from 'node:cluster';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
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
import { applyServerLimits, serverOptions } from './server-limits.js';
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
  server: Server;
  /** Base URL, e.g. http://127.0.0.1:4000 */
  url: string;
  port: number;
  /**
   * Graceful stop: /ready fails at once, WebSockets close with 1001, keep-alive
   * connections close after their answer, in-flight requests get SHUTDOWN_GRACE_MS.
   */
  close(): Promise<void>;
}

/** Probes and scrapes log at debug, everything else at info. */
const QUIET_PATHS = new Set(['/health', '/ready', '/metrics']);

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
  let draining = false;

  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const route = (req: IncomingMessage, res: ServerResponse, pathname: string) => {
    if (options.graphiql?.handle(req, res, pathname)) return;
    if (pathname === '/graphql') return graphqlHttp(req, res);
    if (pathname === config.webhook.path) {
      if (receiver) return receiver.handle(req, res);
      return json(res, 503, { error: 'webhooks_not_configured', message: 'Set WEBHOOK_PUBLIC_KEY_FILE and WEBHOOK_ISSUER to receive webhooks.' });
    }
    // With WORKERS, which worker answered (the cluster hands each connection to one).
    if (pathname === '/health') return json(res, 200, cluster.worker ? { status: 'ok', worker: cluster.worker.id } : { status: 'ok' });
    if (pathname === '/ready') return readiness.handle(res, draining);
    if (pathname === '/metrics' && metrics) return metrics.handle(req, res);
    if (options.trackingPage?.handle(req, res, pathname)) return;
    json(res, 404, { error: 'not_found', message: `Nothing at ${pathname}. GraphQL is at /graphql.` });
  };

  const logWhenDone = (req: IncomingMessage, res: ServerResponse, pathname: string, info: RequestInfo) => {
    const started = performance.now();
    res.once('close', () => {
      logger[QUIET_PATHS.has(pathname) ? 'debug' : 'info'](
        {
          reqId: info.id,
          method: req.method,
          path: pathname,
          status: res.statusCode,
          durationMs: Math.round((performance.now() - started) * 1000) / 1000,
          ...(info.operationName !== undefined || info.operationType !== undefined ? { operation: info.operationName ?? null, operationType: info.operationType } : {}),
          ...(res.writableFinished ? {} : { aborted: true }),
        },
        'request',
      );
    });
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const pathname = (req.url ?? '/').split('?', 1)[0]!;
    // Every request gets an id (the caller's x-request-id when it is a plain token), echoed in the response.
    const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
    attachRequestInfo(req, info);
    res.setHeader('x-request-id', info.id);
    // While stopping, each keep-alive connection closes after its answer: the upstream's
    // webhook sender (and any client) would otherwise keep it busy until the grace period ends.
    if (draining) res.setHeader('connection', 'close');
    // CORS before any path is chosen, so every answer carries it; a preflight is answered here.
    const preflight = cors.handle(req, res);
    if (logRequests) logWhenDone(req, res, pathname, info);
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
  // WebSocket upgrades come through the same door: an id and a log line like any request (CORS is the socket's allowOrigin).
  server.on('upgrade', (req: IncomingMessage) => {
    const info: RequestInfo = { id: requestId(req.headers['x-request-id']) };
    attachRequestInfo(req, info);
    if (logRequests) logger.info({ reqId: info.id, method: req.method, path: (req.url ?? '/').split('?', 1)[0], upgrade: req.headers.upgrade }, 'upgrade');
  });
  // After listen: a listen error (a busy port) is then the server's alone, not re-emitted by the WebSocket server.
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
  const port = (server.address() as AddressInfo).port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;

  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      draining = true;
      await ws.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const grace = setTimeout(() => server.closeAllConnections(), config.shutdownGraceMs);
      await closed;
      clearTimeout(grace);
    })());

  return { server, url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`, port, close };
}
