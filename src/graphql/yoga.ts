// The GraphQL server every transport runs through: the schema, error masking,
// the plugin chain (observation, limits, rate limits, compiled execution) and
// the context each operation gets. The HTTP front door (src/http/) hands it
// requests; it owns no socket.
import type { IncomingMessage } from 'node:http';
import { useGraphQlJit } from '@envelop/graphql-jit';
import type { GraphQLError } from 'graphql';
import { createGraphQLError, createYoga, maskError as yogaMaskError, type Plugin, type YogaServerInstance } from 'graphql-yoga';
import { DeliveryGraphError } from '../errors.js';
import type { Logger } from '../logger.js';
import { useObservability } from '../observability/graphql-plugin.js';
import type { Metrics } from '../observability/metrics.js';
import { requestScope } from '../observability/request.js';
import { createContext, type GraphQLContext, type Services } from './context.js';
import type { PersistedOperations } from './persisted-operations.js';
import { protectionPlugins } from './protection.js';
import type { RequestLimits } from './rate-limit.js';
import { toSchema } from './schema.js';

export type GraphQLServer = YogaServerInstance<Record<string, unknown>, GraphQLContext>;

export interface GraphQLServerOptions {
  services: Services;
  logger: Logger;
  metrics: Metrics | undefined;
  /** The tracing plugin, when OTEL_TRACING is on. */
  tracing: Plugin | undefined;
  limits: RequestLimits;
  /** Operations by hash: the allowlist, or automatic persisted queries. */
  persisted: PersistedOperations;
  /** GraphiQL's page renderer and options (src/web/graphiql.ts), or off. */
  graphiql: Pick<Parameters<typeof createYoga>[0], 'renderGraphiQL' | 'graphiql'>;
}

/**
 * Turns our typed errors into GraphQL errors with a stable extensions.code;
 * everything else is masked as "Unexpected error." (INTERNAL_SERVER_ERROR), and
 * the original, which only the operator may see, is logged.
 */
function maskErrorWith(logger: Logger) {
  return (error: unknown, message: string, isDev?: boolean): Error => {
    const masked = maskError(error, message, isDev);
    if ((masked as Partial<GraphQLError>).extensions?.code === 'INTERNAL_SERVER_ERROR') {
      const located = error as Partial<GraphQLError> | undefined;
      logger.error({ reqId: requestScope.getStore()?.id, err: located?.originalError ?? error, path: located?.path?.join('.') }, 'unexpected error in a GraphQL operation (answered "Unexpected error.")');
    }
    return masked;
  };
}

function maskError(error: unknown, message: string, isDev?: boolean): Error {
  // A GraphQLError wraps what a resolver threw (originalError); a plain error stands for itself.
  const located = error as Partial<GraphQLError> | undefined;
  const original = located?.originalError ?? error;
  if (!(original instanceof DeliveryGraphError)) return yogaMaskError(error, message, isDev);
  // An upstream refusal of a body we did not send (a read, a cancel) is not the client's input: say so, without the upstream's words.
  const [text, code] = original.code === 'VALIDATION' ? ['The delivery service refused the request.', 'UPSTREAM_ERROR'] : [original.message, original.code];
  return createGraphQLError(text, { nodes: located?.nodes, source: located?.source, positions: located?.positions, path: located?.path, extensions: { code } });
}

/** Each server's persisted operations, for the transports that resolve hashes before calling into it (http/graphql.ts, http/ws.ts). */
const persistedOf = new WeakMap<GraphQLServer, PersistedOperations>();

/** The persisted operations (allowlist or APQ) a GraphQL server was created with. */
export function persistedOperationsOf(yoga: GraphQLServer): PersistedOperations | undefined {
  return persistedOf.get(yoga);
}

export function createGraphQLServer(options: GraphQLServerOptions): GraphQLServer {
  const yoga = createYogaServer(options);
  persistedOf.set(yoga, options.persisted);
  return yoga;
}

function createYogaServer(options: GraphQLServerOptions): GraphQLServer {
  const { services, logger, metrics } = options;
  const { config } = services;
  return createYoga({
    schema: toSchema(),
    graphqlEndpoint: '/graphql',
    landingPage: false,
    // CORS is the front door's (src/http/server.ts), the same for every path.
    cors: false,
    logging: false,
    ...options.graphiql,
    // Never the original message or stack, whatever NODE_ENV says.
    maskedErrors: { maskError: maskErrorWith(logger), isDev: false },
    // No uploads in this schema; multipart is also a form a foreign site can POST.
    multipart: false,
    maxRequestBodySize: config.graphql.maxBodyBytes,
    // Observation first, so operations a later plugin refuses are counted too; then limits,
    // allowlist and rate limits (protection.ts); last, compiled execution: each distinct
    // operation is compiled once (graphql-jit), subscriptions too (their fields read their
    // own arguments, see argumentsOf in events.ts).
    plugins: [useObservability(metrics), ...(options.tracing ? [options.tracing] : []), ...protectionPlugins({ config, limiter: options.limits, persisted: options.persisted }), useGraphQlJit()],
    // Every transport hands over the Node request (req): the client address comes from it.
    // Over WebSocket the initial context also carries the connection_init authorization and a way to close the socket.
    context: (initial: Record<string, unknown>) => {
      const { request, req, authorization, disconnect, signal } = initial as {
        request?: Request;
        req?: IncomingMessage;
        authorization?: string;
        disconnect?: (code: number, reason: string) => void;
        signal?: AbortSignal | (() => AbortSignal);
      };
      return createContext(services, {
        authorization: authorization ?? request?.headers.get('authorization'),
        req,
        limits: options.limits,
        disconnect,
        signal: signal ?? (() => request?.signal),
      });
    },
  });
}
