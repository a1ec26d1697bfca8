// GraphQL over WebSocket (graphql-transport-ws) on the HTTP server's /graphql
// path. Operations run through the same pipeline as over HTTP (every guard, the
// same plan per operation). The merchant key travels in the connection_init payload and
// is checked once there (see WS_CLOSE), so a refused key costs the upstream no
// call per event. One socket runs at most WS_MAX_SUBSCRIPTIONS operations at once;
// the caps per key, client token and address are the pipeline's, for every transport.
import type { Server } from 'node:http';
import { Kind, parse, type ExecutionArgs, type GraphQLError, type GraphQLSchema } from 'graphql';
import type { Context } from 'graphql-ws';
import { useServer, type Extra } from 'graphql-ws/use/ws';
import { WebSocketServer, type WebSocket } from 'ws';
import { readCaller, type Caller } from '../access/caller.js';
import type { ClientTokens } from '../access/client-tokens.js';
import type { RequestLimits } from '../access/rate-limit.js';
import { UnauthenticatedError } from '../errors.js';
import { clientAddress } from '../observability/client-address.js';
import { toGraphQLError } from '../pipeline/limits.js';
import { namesPersistedQuery } from '../pipeline/persisted-operations.js';
import type { Pipeline } from '../pipeline/pipeline.js';
import { writingSharedFrames } from '../realtime/frames.js';
import type { Upstream } from '../upstream/clients.js';
import type { Logger } from '../logger.js';
import { SocketLog } from './ws-log.js';

export const WS_MAX_PAYLOAD_BYTES = 64 * 1024;

/**
 * How a socket is closed at connection_init, and why. graphql-ws clients do not
 * reconnect after 4429 (their "too many initialisation requests"), which suits
 * an address that has to wait; after 4403 they may, and the reason says why not.
 */
export const WS_CLOSE = {
  noKey: { code: 4403, reason: 'no merchant key or client token in connection_init' },
  refusedToken: { code: 4403, reason: 'the client token is not accepted (altered, expired or made by another server)' },
  refused: { code: 4403, reason: 'the merchant key was refused' },
  tooManyUnknownKeys: { code: 4429, reason: 'too many unknown keys from this address' },
} as const;

/** Longest the upstream may take to judge a new key at connect; past it the socket is let in. */
const CONNECT_CHECK_MS = 3_000;

/** `{"authorization": "Bearer <key>"}`, the key name in any case. */
export function authorizationOf(payload: unknown): string | undefined {
  if (!payload || typeof payload !== 'object') return undefined;
  for (const [name, value] of Object.entries(payload)) {
    if (name.toLowerCase() === 'authorization' && typeof value === 'string') return value;
  }
  return undefined;
}

export interface GraphQLWebSocket {
  wss: WebSocketServer;
  /** Closes every socket with 1001 (going away) and stops accepting. */
  close(): Promise<void>;
}

export interface GraphQLWebSocketParts {
  pipeline: Pipeline;
  schema: GraphQLSchema;
  clientTokens: ClientTokens;
  limits: RequestLimits;
  upstream: Upstream;
  /** TRUST_PROXY's hops, for the client address of the upgrade request. */
  trustProxyHops: number;
  /** Where each operation's and each socket's access-log line goes (at info). */
  logger?: Logger;
}

export interface GraphQLWebSocketOptions {
  path?: string;
  /** Operations one socket may run at once; the next subscribe gets TOO_MANY_SUBSCRIPTIONS. */
  maxSubscriptions: number;
  /** CORS_ORIGINS for sockets: a browser page on another origin is refused (403) at the upgrade. */
  allowOrigin?: (origin: string) => boolean;
}

/** What graphql-ws runs for an operation the pipeline already ran: its outcome, handed back as is. */
type Ran = { outcome: unknown };

/**
 * The document graphql-ws is shown for a refusal that came before any document was read (a rate limit): a query, so it
 * calls execute.
 */
const REFUSAL_DOCUMENT = parse('{ __typename }');

/**
 * A subscribe message whose payload names a persisted query but has no `query`
 * (the graphql-ws client always sends one; a hand-written APQ client may not),
 * given `query: ""`; any other message as it came.
 */
function withPersistedQueryText(message: unknown): unknown {
  const { type, payload } = (message ?? {}) as { type?: unknown; payload?: Record<string, unknown> | null };
  if (type !== 'subscribe' || !payload || typeof payload !== 'object' || payload.query != null) return message;
  if (!namesPersistedQuery(payload)) return message;
  return { ...(message as object), payload: { ...payload, query: '' } };
}

/**
 * Yoga marks request errors with extensions.http (the status of an HTTP answer);
 * on a socket that means nothing, so it is left out. The copy is made with the
 * error's own class, so a subclass stays what it was.
 */
function forSocket(errors: readonly GraphQLError[]): GraphQLError[] {
  return errors.map((error) => {
    if (!error?.extensions || !('http' in error.extensions)) return error;
    const { http: _http, ...extensions } = error.extensions;
    const ErrorClass = error.constructor as typeof GraphQLError;
    return new ErrorClass(error.message, {
      nodes: error.nodes,
      source: error.source,
      positions: error.positions,
      path: error.path,
      originalError: error.originalError,
      extensions,
    });
  });
}

/**
 * One signal per socket, made when an operation first asks, aborted when the socket closes: the reads of its operations
 * stop.
 */
const goneSignals = new WeakMap<WebSocket, AbortSignal>();
function goneSignal(socket: WebSocket): AbortSignal {
  let signal = goneSignals.get(socket);
  if (!signal) {
    const controller = new AbortController();
    if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING)
      socket.once('close', () => controller.abort());
    else controller.abort();
    signal = controller.signal;
    goneSignals.set(socket, signal);
  }
  return signal;
}

/**
 * Puts a key to the upstream with its cheapest keyed call, the platform group's
 * availability; only when that group refuses it, the partner group's (a key may
 * be valid there alone). The upstream clients learn the answers; a failure that
 * is not a refusal (down, slow) leaves the key unjudged.
 */
async function askUpstream(upstream: Upstream, key: string, signal: AbortSignal): Promise<void> {
  try {
    await upstream.platform.availability(key, { signal });
    return;
  } catch (error) {
    if (!(error instanceof UnauthenticatedError)) return;
  }
  await upstream.partner.availability(key, { signal }).catch(() => undefined);
}

/**
 * Writes a frame as graphql-ws writes its own: done once the socket has taken it; nothing on a socket no longer open.
 */
function sendFrame(socket: WebSocket, frame: string): Promise<void> {
  return new Promise((resolve, reject) => {
    if (socket.readyState !== socket.OPEN) return resolve();
    socket.send(frame, (error) => (error ? reject(error) : resolve()));
  });
}

/** The caller of each socket, read once at connection_init. */
const callers = new WeakMap<WebSocket, Caller>();

/**
 * graphql-ws's onConnect: the key is judged once, here. A socket that is let in has a key the upstream accepted, or one
 * it could not judge now (each operation is still checked as over HTTP).
 */
async function admitSocket(
  ctx: Context<Record<string, unknown> | undefined, Extra>,
  { clientTokens, limits, upstream, trustProxyHops }: GraphQLWebSocketParts,
): Promise<boolean> {
  const socket = ctx.extra.socket;
  // graphql-ws would close with 4403 "Forbidden"; the reason here says which refusal it is.
  const refuse = (code: number, reason: string) => {
    socket.close(code, reason);
    return false;
  };
  const caller = await readCaller(authorizationOf(ctx.connectionParams), clientTokens);
  if (caller.kind === 'anonymous') return refuse(WS_CLOSE.noKey.code, WS_CLOSE.noKey.reason);
  // A client token is judged by its own encryption: the upstream accepted its key when it was made.
  if (caller.kind === 'refused-token') return refuse(WS_CLOSE.refusedToken.code, WS_CLOSE.refusedToken.reason);
  callers.set(socket, caller);
  if (caller.kind === 'client-token') return true;
  const { key } = caller;
  // The upstream is asked only about a key it has not judged; the call stops when the socket goes or takes too
  // long.
  const ask = () =>
    askUpstream(upstream, key, AbortSignal.any([AbortSignal.timeout(CONNECT_CHECK_MS), goneSignal(socket)]));
  const admission = await limits.admitConnection(key, clientAddress(ctx.extra.request, trustProxyHops), ask);
  if (admission.verdict === 'refused') return refuse(WS_CLOSE.refused.code, WS_CLOSE.refused.reason);
  if (admission.verdict === 'too-many-unknown-keys') {
    return refuse(
      WS_CLOSE.tooManyUnknownKeys.code,
      `${WS_CLOSE.tooManyUnknownKeys.reason}; retry in ${admission.retryAfterSeconds} s`,
    );
  }
  return true;
}

export function attachGraphQLWebSocket(
  server: Server,
  parts: GraphQLWebSocketParts,
  { path = '/graphql', maxSubscriptions, allowOrigin }: GraphQLWebSocketOptions,
): GraphQLWebSocket {
  const { pipeline, schema } = parts;
  const log = SocketLog.for(parts.logger);
  const wss = new WebSocketServer({
    server,
    path,
    maxPayload: WS_MAX_PAYLOAD_BYTES,
    // Browsers send Origin on a socket but apply no CORS to it: the same origins as HTTP are checked here.
    // Clients that are not browsers send none and are let through (the key in connection_init is what counts).
    verifyClient: allowOrigin
      ? ({ req }, accept) => {
          const origin = req.headers.origin;
          if (typeof origin !== 'string' || allowOrigin(origin)) accept(true);
          else accept(false, 403, 'Origin not allowed (CORS_ORIGINS)');
        }
      : undefined,
  });
  const disposable = useServer(
    {
      connectionInitWaitTimeout: 5_000,
      // graphql-ws refuses a subscribe without a query string (4400); one named by persisted hash alone gets an empty
      // one.
      jsonMessageReviver: (key, value) => (key === '' ? withPersistedQueryText(value) : value),
      onConnect: (ctx) => admitSocket(ctx, parts),
      // The access log's lines: what each operation's results and end say, and the socket's close.
      ...log?.hooks(),
      // The pipeline has already run the operation (onSubscribe): graphql-ws only delivers its outcome.
      execute: (args) => (args.rootValue as Ran).outcome as never,
      subscribe: (args) => (args.rootValue as Ran).outcome as never,
      onSubscribe: async (ctx, id, payload) => {
        // graphql-ws records every running operation of the socket, this one included, until it ends. A subscription
        // also holds slots of its key, client token and address, whichever socket or stream it runs on: the pipeline
        // takes them.
        if (Object.keys(ctx.subscriptions).length > maxSubscriptions) {
          const refusal = pipeline.subscriptions.refuse('socket', maxSubscriptions);
          // Logged by onError, as every refusal before the operation runs.
          return [toGraphQLError(refusal, { setting: refusal.setting, limit: refusal.limit })];
        }
        const socket = ctx.extra.socket;
        const caller = callers.get(socket);
        if (!caller) return [toGraphQLError(new UnauthenticatedError())];
        const answer = await pipeline.run({
          params: payload,
          caller,
          method: 'SOCKET',
          streams: true,
          req: ctx.extra.request,
          disconnect: (code: number, reason: string) => socket.close(code, reason),
          signal: () => goneSignal(socket),
        });
        if (answer.kind === 'invalid') return forSocket(answer.errors);
        // graphql-ws picks execute or subscribe by the document's operation: the plan's own, or a query for a refusal
        // made before any.
        const { plan, outcome } = answer;
        const document = plan ? plan.runnable : REFUSAL_DOCUMENT;
        const operation = document.definitions.find((definition) => definition.kind === Kind.OPERATION_DEFINITION);
        log?.started(socket, id, plan?.kind, operation && 'name' in operation ? operation.name?.value : undefined);
        // A stream's shared messages are written here, each its shared text with this operation's id
        // (src/realtime/frames.ts).
        const ran =
          Symbol.asyncIterator in outcome
            ? writingSharedFrames(outcome, id, (frame) => sendFrame(socket, frame))
            : outcome;
        return {
          schema,
          document,
          operationName: operation && 'name' in operation ? operation.name?.value : undefined,
          rootValue: { outcome: ran } satisfies Ran,
        } as ExecutionArgs;
      },
    },
    wss,
    15_000,
  );
  if (log) wss.on('connection', (socket) => log.opened(socket));
  return {
    wss,
    async close() {
      for (const client of wss.clients) client.close(1001, 'server shutting down');
      await disposable.dispose();
    },
  };
}
