// GraphQL over WebSocket (graphql-transport-ws) on the HTTP server's /graphql
// path. Operations run through yoga's envelop, so the same plugins apply to
// both transports. The merchant key travels in the connection_init payload.
import type { Server } from 'node:http';
import type { ExecutionArgs } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import type { YogaServerInstance } from 'graphql-yoga';
import { WebSocketServer } from 'ws';
import type { GraphQLContext } from '../graphql/context.js';

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

type Envelop = { execute: (args: ExecutionArgs) => unknown; subscribe: (args: ExecutionArgs) => unknown };

export function attachGraphQLWebSocket(server: Server, yoga: YogaServerInstance<Record<string, unknown>, GraphQLContext>, path = '/graphql'): GraphQLWebSocket {
  const wss = new WebSocketServer({ server, path, maxPayload: WS_MAX_PAYLOAD_BYTES });
  const disposable = useServer(
    {
      connectionInitWaitTimeout: 5_000,
      // No key, no connection (closed with 4403 Forbidden).
      onConnect: (ctx) => authorizationOf(ctx.connectionParams) !== undefined,
      execute: (args) => (args.rootValue as Envelop).execute(args) as never,
      subscribe: (args) => (args.rootValue as Envelop).subscribe(args) as never,
      onSubscribe: async (ctx, _id, payload) => {
        const socket = ctx.extra.socket;
        const { schema, execute, subscribe, contextFactory, parse, validate } = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket,
          params: payload,
          authorization: authorizationOf(ctx.connectionParams),
          disconnect: (code: number, reason: string) => socket.close(code, reason),
        });
        let document;
        try {
          document = parse(payload.query);
        } catch (error) {
          return [error as never];
        }
        const errors = validate(schema, document);
        if (errors.length > 0) return errors;
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
