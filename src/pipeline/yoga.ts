// The GraphQL server: the schema, the pipeline every operation runs through, and
// graphql-yoga for what it does well on HTTP (reading GET and POST requests,
// GraphiQL, server-sent events, the GraphQL-over-HTTP status rules). Yoga reads
// a request's parameters; from there the pipeline (pipeline.ts) runs it, as it
// runs the direct JSON path's and graphql-ws's operations. The HTTP front door
// (src/http/) hands both their requests; this owns no socket.
import {
  createGraphQLError,
  createYoga,
  getSSEProcessor,
  isAsyncIterable,
  maskError as yogaMaskError,
  processRegularResult,
  type Plugin,
  type YogaServerInstance,
} from 'graphql-yoga';
import { getOperationAST, parse, type GraphQLError } from 'graphql';
import { readCaller } from '../access/caller.js';
import type { RequestLimits } from '../access/rate-limit.js';
import { DeliveryGraphError } from '../errors.js';
import type { GraphQLContext, Services } from '../graphql/context.js';
import { toSchema } from '../graphql/schema.js';
import type { Logger } from '../logger.js';
import { requestScope } from '../observability/request.js';
import { Documents } from './documents.js';
import { namesPersistedQuery, type PersistedOperations } from './persisted-operations.js';
import { Pipeline, SUBSCRIPTION_WITHOUT_STREAM, type GraphQLParams, type OperationObserver } from './pipeline.js';

export type GraphQLServer = YogaServerInstance<Record<string, unknown>, GraphQLContext>;

export interface GraphQLServerOptions {
  services: Services;
  logger: Logger;
  /** Metrics and tracing, each told of every operation that runs. */
  observers: readonly OperationObserver[];
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
      logger.error(
        { reqId: requestScope.getStore()?.id, err: located?.originalError ?? error, path: located?.path?.join('.') },
        'unexpected error in a GraphQL operation (answered "Unexpected error.")',
      );
    }
    return masked;
  };
}

function maskError(error: unknown, message: string, isDev?: boolean): Error {
  // A GraphQLError wraps what a resolver threw (originalError); a plain error stands for itself.
  const located = error as Partial<GraphQLError> | undefined;
  const original = located?.originalError ?? error;
  if (!(original instanceof DeliveryGraphError)) return yogaMaskError(error, message, isDev);
  const { upstream } = original;
  // An upstream refusal of a body we did not send (a read, a cancel) is not the client's input: UPSTREAM_ERROR, with
  // the upstream's (scrubbed) words.
  const [text, code] =
    original.code === 'VALIDATION'
      ? [
          upstream?.message
            ? `The delivery service refused the request: ${upstream.message}`
            : 'The delivery service refused the request.',
          'UPSTREAM_ERROR',
        ]
      : [original.message, original.code];
  const extensions = upstream ? { code, upstream } : { code };
  return createGraphQLError(text, {
    nodes: located?.nodes,
    source: located?.source,
    positions: located?.positions,
    path: located?.path,
    extensions,
  });
}

/** Content types a browser may POST cross-site without a preflight (CSRF). */
const SIMPLE_CONTENT_TYPES = new Set(['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data']);

/**
 * Refuses POSTs a form on another site could send (415): yoga would otherwise
 * execute url-encoded and multipart bodies. The direct path only ever takes
 * application/json, so yoga's onRequest is the one place this is needed.
 */
function useRefuseSimplePosts(): Plugin {
  return {
    onRequest({ request, endResponse, fetchAPI }) {
      if (request.method !== 'POST') return;
      const type = (request.headers.get('content-type') ?? '').split(';', 1)[0]!.trim().toLowerCase();
      if (type !== '' && !SIMPLE_CONTENT_TYPES.has(type)) return;
      const body = JSON.stringify({
        errors: [{ message: 'POST a GraphQL request as application/json.', extensions: { code: 'BAD_REQUEST' } }],
      });
      endResponse(
        new fetchAPI.Response(body, { status: 415, headers: { 'content-type': 'application/json; charset=utf-8' } }),
      );
    },
  };
}

/**
 * Requests yoga cannot read, answered without echoing them. A body that is not
 * JSON gets "POST body sent invalid JSON." and, in extensions.originalError, the
 * JSON parser's message, which quotes the body back (a key pasted into it, say):
 * the refusal keeps its message, code and status without it. A GET whose
 * `variables` or `extensions` parameter is not JSON throws the parser's own
 * SyntaxError, which would be masked as a 500 "Unexpected error.": it is the
 * client's mistake, so 400 BAD_REQUEST.
 */
function useRequestParseErrors(): Plugin {
  const quiet = (error: unknown): never => {
    if (error instanceof SyntaxError) {
      throw createGraphQLError('The variables or extensions parameter is not valid JSON.', {
        extensions: { code: 'BAD_REQUEST', http: { status: 400 } },
      });
    }
    const extensions = (error as Partial<GraphQLError> | undefined)?.extensions;
    if (!extensions || !('originalError' in extensions)) throw error;
    const {
      originalError: _echo,
      http,
      ...kept
    } = extensions as { originalError?: unknown; http?: { status?: number; spec?: boolean } };
    // yoga answers a spec-marked error 200 under application/json unless it carries that originalError: without it, the
    // status stands on its own (400, as the GraphQL-over-HTTP spec wants for a body that does not parse).
    throw createGraphQLError((error as Error).message, {
      extensions: http ? { ...kept, http: { status: http.status } } : kept,
    });
  };
  return {
    onRequestParse({ requestParser, setRequestParser }) {
      if (!requestParser) return;
      setRequestParser((request) => {
        let parsed: ReturnType<typeof requestParser>;
        try {
          parsed = requestParser(request);
        } catch (error) {
          return quiet(error);
        }
        return parsed instanceof Promise ? parsed.catch(quiet) : parsed;
      });
    },
  };
}

// Whether a request takes server-sent events for an answer: by name, or as any type (or no accept at all).
function takesStream(request: Request): boolean {
  const accept = request.headers.get('accept');
  return !accept || /text\/event-stream|\*\/\*/i.test(accept);
}

// The media types yoga's result processors answer in (JSON, server-sent events, multipart), and the ranges that cover
// them.
const ANSWERABLE =
  /^(\*\/\*|application\/\*|application\/json|application\/graphql-response\+json|text\/\*|text\/event-stream|multipart\/\*|multipart\/mixed)$/;

// Whether the accept header (none: anything) allows an answer this server can give.
function answerable(request: Request): boolean {
  const accept = request.headers.get('accept');
  if (!accept) return true;
  return accept.split(',').some((range) => ANSWERABLE.test(range.split(';', 1)[0]!.trim().toLowerCase()));
}

// Whether the request's document is a subscription (read only for a request refused anyway).
function subscribes(params: GraphQLParams): boolean {
  if (typeof params.query !== 'string' || !params.query) return false;
  try {
    return (
      getOperationAST(parse(params.query), typeof params.operationName === 'string' ? params.operationName : undefined)
        ?.operation === 'subscription'
    );
  } catch {
    return false;
  }
}

const NOT_ACCEPTABLE = () =>
  createGraphQLError(
    'This endpoint answers in application/graphql-response+json or application/json (a subscription in text/event-stream): send one of them in the accept header, or none.',
    { extensions: { code: 'BAD_REQUEST', http: { status: 406 } } },
  );

/**
 * Hands every operation yoga's handler has read to the pipeline: yoga's own
 * parse, validate and execute are never called, so there is no second place
 * where an operation could be judged or run.
 */
function usePipeline(pipeline: Pipeline, services: Services): Plugin {
  const serverSentEvents = getSSEProcessor();
  return {
    // A stream goes out as server-sent events (yoga would pick multipart for a plain accept, having not seen it
    // subscribe). Yoga answers 406 with no body when no processor takes the accept header: the refusal below is written
    // as JSON instead.
    onResultProcess({ request, result, resultProcessor, setResultProcessor }) {
      if (isAsyncIterable(result) && takesStream(request)) setResultProcessor(serverSentEvents, 'text/event-stream');
      else if (!resultProcessor) setResultProcessor(processRegularResult, 'application/json');
    },
    onParams({ params, setParams, setParamsHandler }) {
      setParamsHandler(async ({ request, params, context }) => {
        // Refused before it runs: a mutation must not take effect only for its answer to be refused.
        if (!answerable(request))
          return { errors: [subscribes(params as GraphQLParams) ? SUBSCRIPTION_WITHOUT_STREAM() : NOT_ACCEPTABLE()] };
        const { req } = context as { req?: import('node:http').IncomingMessage };
        const caller = await readCaller(request.headers.get('authorization'), services.clientTokens);
        const answer = await pipeline.run({
          params: params as GraphQLParams,
          caller,
          method: request.method === 'GET' ? 'GET' : 'POST',
          streams: takesStream(request),
          req,
          headers: req ? undefined : Object.fromEntries(request.headers),
          signal: () => request.signal,
        });
        return answer.kind === 'invalid' ? { errors: answer.errors as GraphQLError[] } : (answer.outcome as never);
      });
      // A query named by hash alone: yoga's own check wants a query string, and the pipeline resolves the hash after
      // the caller's budgets.
      if (params.query == null && namesPersistedQuery(params)) setParams({ ...params, query: '' });
    },
  };
}

export interface GraphQLServerParts {
  yoga: GraphQLServer;
  pipeline: Pipeline;
}

export function createGraphQLServer(options: GraphQLServerOptions): GraphQLServerParts {
  const { services, logger } = options;
  const { config } = services;
  const schema = toSchema();
  const masking = maskErrorWith(logger);
  const pipeline = new Pipeline({
    services,
    limits: options.limits,
    persisted: options.persisted,
    observers: options.observers,
    maskError: (error) => masking(error, 'Unexpected error.', false) as GraphQLError,
    documents: new Documents({
      schema,
      maxBatch: config.graphql.maxBatchSize,
      hideSuggestions: !config.graphql.introspection,
      introspection: config.graphql.introspection,
      federationSdl: config.graphql.federationSdl,
      cacheBytes: config.graphql.cacheBytes,
      compileMaxFields: config.graphql.compileMaxFields,
      compilesPerMinute: config.graphql.compilesPerMinute,
    }),
  });
  const yoga = createYoga({
    schema,
    graphqlEndpoint: '/graphql',
    landingPage: false,
    // CORS is the front door's (src/http/server.ts), the same for every path.
    cors: false,
    logging: false,
    ...options.graphiql,
    // Never the original message or stack, whatever NODE_ENV says.
    maskedErrors: { maskError: masking, isDev: false },
    // No uploads in this schema; multipart is also a form a foreign site can POST.
    multipart: false,
    // Documents are the pipeline's to parse and keep (documents.ts), for callers who earned it.
    parserAndValidationCache: false,
    maxRequestBodySize: config.graphql.maxBodyBytes,
    plugins: [useRefuseSimplePosts(), useRequestParseErrors(), usePipeline(pipeline, services)],
  }) as unknown as GraphQLServer;
  return { yoga, pipeline };
}
