// GraphQL over WebSocket (graphql-transport-ws) on the HTTP server's /graphql
// path. Operations run through yoga's envelop, so the same plugins apply to
// both transports. The merchant key travels in the connection_init payload.
// One socket runs at most WS_MAX_SUBSCRIPTIONS operations at once.
import type { Server } from 'node:http';
import type { ExecutionArgs, GraphQLError } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import type { YogaServerInstance } from 'graphql-yoga';
import { WebSocketServer, type WebSocket } from 'ws';
import { DeliveryGraphError, TooManySubscriptionsError } from '../errors.js';
import type { GraphQLContext } from '../graphql/context.js';
import type { PersistedOperations } from '../graphql/persisted-operations.js';
import { toGraphQLError } from '../graphql/protection.js';

export const WS_MAX_PAYLOAD_BYTES = 64 * 1024;

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

export interface GraphQLWebSocketOptions {
  path?: string;
  /** Operations one socket may run at once; the next subscribe gets TOO_MANY_SUBSCRIPTIONS. */
  maxSubscriptions: number;
  /** The allowlist, when PERSISTED_OPERATIONS_FILE is set: hashes in `extensions.persistedQuery` resolve here. */
  persisted?: PersistedOperations;
  /** CORS_ORIGINS for sockets: a browser page on another origin is refused (403) at the upgrade. */
  allowOrigin?: (origin: string) => boolean;
}

type Envelop = { execute: (args: ExecutionArgs) => unknown; subscribe: (args: ExecutionArgs) => unknown };

/**
 * Yoga marks request errors with extensions.http (the status of an HTTP answer);
 * on a socket that means nothing, so it is left out. The copy is made with the
 * error's own class: graphql may be loaded twice (ESM and CJS), and graphql-ws
 * accepts only instances of the copy it loaded.
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

/** One signal per socket, made when an operation first asks, aborted when the socket closes: the reads of its operations stop. */
const goneSignals = new WeakMap<WebSocket, AbortSignal>();
function goneSignal(socket: WebSocket): AbortSignal {
  let signal = goneSignals.get(socket);
  if (!signal) {
    const controller = new AbortController();
    if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING) socket.once('close', () => controller.abort());
    else controller.abort();
    signal = controller.signal;
    goneSignals.set(socket, signal);
  }
  return signal;
}

export function attachGraphQLWebSocket(
  server: Server,
  yoga: YogaServerInstance<Record<string, unknown>, GraphQLContext>,
  { path = '/graphql', maxSubscriptions, persisted, allowOrigin }: GraphQLWebSocketOptions,
): GraphQLWebSocket {
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
      // No key, no connection (closed with 4403 Forbidden).
      onConnect: (ctx) => authorizationOf(ctx.connectionParams) !== undefined,
      execute: (args) => (args.rootValue as Envelop).execute(args) as never,
      subscribe: (args) => (args.rootValue as Envelop).subscribe(args) as never,
      onSubscribe: async (ctx, _id, payload) => {
        // graphql-ws records every running operation of the socket, this one included, until it ends.
        if (Object.keys(ctx.subscriptions).length > maxSubscriptions) return [toGraphQLError(new TooManySubscriptionsError(maxSubscriptions))];
        const socket = ctx.extra.socket;
        const { schema, execute, subscribe, contextFactory, parse, validate } = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket,
          params: payload,
          authorization: authorizationOf(ctx.connectionParams),
          disconnect: (code: number, reason: string) => socket.close(code, reason),
          signal: () => goneSignal(socket),
        });
        let document;
        try {
          document = parse(persisted?.documentFor(payload) ?? payload.query);
        } catch (error) {
          return forSocket([(error instanceof DeliveryGraphError ? toGraphQLError(error) : error) as GraphQLError]);
        }
        let errors;
        try {
          errors = validate(schema, document);
        } catch (error) {
          return forSocket([error as GraphQLError]);
        }
        if (errors.length > 0) return forSocket(errors);
        return {
          schema,
          operationName: payload.operationName,
          document,
          variableValues: payload.variables,
          contextValue: await contextFactory(),
          rootValue: { execute, subscribe },
        };
      },
    },
    wss,
    15_000,
  );
  return {
    wss,
    async close() {
      for (const client of wss.clients) client.close(1001, 'server shutting down');
      await disposable.dispose();
    },
  };
}
