// What a GraphQL request may ask for before it runs. These are envelop plugins in
// yoga's plugin list, so yoga's full handler, the direct JSON path
// (graphql/http.ts) and graphql-ws (realtime/ws.ts) all run them through
// yoga.getEnveloped(). Only the yoga-level hooks (onRequest, onParams) reach
// yoga's own handler alone; each says below how the other paths are covered.
import { costLimitPlugin } from '@escape.tech/graphql-armor-cost-limit';
import { maxAliasesPlugin } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { maxDirectivesPlugin } from '@escape.tech/graphql-armor-max-directives';
import { maxTokensPlugin } from '@escape.tech/graphql-armor-max-tokens';
import { Kind, type ASTVisitor, type DocumentNode, type ExecutionResult, type FieldNode, type GraphQLError, type SelectionSetNode, type ValidationContext } from 'graphql';
import { createGraphQLError, type Plugin } from 'graphql-yoga';
import type { Config } from '../config.js';
import { DeliveryGraphError, PersistedQueryNotFoundError, RateLimitedError } from '../errors.js';
import type { GraphQLContext } from './context.js';
import type { PersistedOperations } from './persisted-operations.js';
import type { KeyRateLimiter } from './rate-limit.js';

/**
 * Limits on one operation. The largest operations of the tests and the README
 * (a full Delivery read through a fragment, a booking with every input) stay
 * well inside them; many reads go in one `deliveries(uids:)` list, not in aliases.
 */
export const OPERATION_LIMITS = {
  /** Nested selection levels (introspection's own nesting is not counted; it is off in production). */
  depth: 12,
  aliases: 30,
  /** Lexical tokens of the whole document, checked while parsing. */
  tokens: 2000,
  directives: 20,
  /**
   * graphql-armor's cost: 1 per scalar, 2 per object, ×1.5 per level, and × `first`
   * for a connection. A full page of 500 events with every field costs about
   * 45,000, so that is what the limit must admit; a page nested in a page
   * (events → node.delivery → events, 500 × 500 rows) costs millions.
   */
  cost: 100_000,
  /** Times one response key may appear in one selection set. */
  fieldRepeats: 10,
} as const;

/** A typed error of ours as a GraphQL error with its stable code. */
export function toGraphQLError(error: DeliveryGraphError, extensions: Record<string, unknown> = {}): GraphQLError {
  return createGraphQLError(error.message, { extensions: { code: error.code, ...extensions } });
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
      const body = JSON.stringify({ errors: [{ message: 'POST a GraphQL request as application/json.', extensions: { code: 'BAD_REQUEST' } }] });
      endResponse(new fetchAPI.Response(body, { status: 415, headers: { 'content-type': 'application/json; charset=utf-8' } }));
    },
  };
}

/** Armor's validation rules report their refusal as a validation error instead of throwing out of validate(). */
const reportRejection = (context: ValidationContext | null, error: GraphQLError) => context?.reportError(error);
const asValidationError = { propagateOnRejection: false, onReject: [reportRejection] };

/**
 * Schema introspection refused by validation: the introspection types are
 * reachable only through `__schema` and `__type`; `__typename` stays.
 * (graphql's NoSchemaIntrospectionCustomRule does the same by type, but under
 * vitest this module's `graphql` is another copy than yoga's, and its type checks throw.)
 */
function useNoIntrospection(): Plugin {
  const rule = (context: ValidationContext): ASTVisitor => ({
    Field(node) {
      const name = node.name.value;
      if (name !== '__schema' && name !== '__type') return;
      context.reportError(createGraphQLError(`GraphQL introspection has been disabled, but the requested query contained the field "${name}".`, { nodes: node }));
    },
  });
  return {
    onValidate({ addValidationRule }) {
      addValidationRule(rule);
    },
  };
}

const SUGGESTION = /\s*Did you mean [^?]*\?/g;

/**
 * Removes "Did you mean …?", which spells out field, argument and enum names,
 * from validation errors. (armor's plugin misses "Did you mean the enum value …?";
 * graphql-jit's variable errors carry no suggestions.)
 */
function useHideSuggestions(): Plugin {
  return {
    onValidate:
      () =>
      ({ result }) => {
        for (const error of result) {
          if (error.message.includes('Did you mean')) error.message = error.message.replace(SUGGESTION, '');
        }
      },
  };
}

/** The first field whose response key appears more than `limit` times in one selection set. */
function overRepeatedField(document: DocumentNode, limit: number): FieldNode | undefined {
  const inSet = (set: SelectionSetNode): FieldNode | undefined => {
    const counts = new Map<string, number>();
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) {
        const key = selection.alias?.value ?? selection.name.value;
        const count = (counts.get(key) ?? 0) + 1;
        if (count > limit) return selection;
        counts.set(key, count);
      }
      const inner = 'selectionSet' in selection && selection.selectionSet ? inSet(selection.selectionSet) : undefined;
      if (inner) return inner;
    }
    return undefined;
  };
  for (const definition of document.definitions) {
    const found = 'selectionSet' in definition ? inSet(definition.selectionSet) : undefined;
    if (found) return found;
  }
  return undefined;
}

/**
 * Refuses a field repeated in one selection set before the standard rules run:
 * graphql-js compares every pair of same-named fields, so 2,000 copies of one
 * field cost tens of milliseconds of validation. Documents that passed are
 * remembered (yoga caches parsed documents, so the same text is the same object).
 */
function useFieldRepeatLimit(limit: number): Plugin {
  const passed = new WeakSet<DocumentNode>();
  return {
    onValidate({ params: { documentAST }, setResult }) {
      if (passed.has(documentAST)) return;
      const field = overRepeatedField(documentAST, limit);
      if (!field) return void passed.add(documentAST);
      const key = field.alias?.value ?? field.name.value;
      setResult([createGraphQLError(`Field "${key}" is selected more than ${limit} times in one selection set.`, { nodes: field })]);
    },
  };
}

/**
 * Enforces PERSISTED_OPERATIONS_FILE. onParse runs on every transport, so an
 * unlisted document is refused everywhere before it is even parsed; onParams
 * turns a hash into its document for yoga's handler (the direct path hands
 * hash-only requests to yoga; graphql-ws resolves hashes in its onSubscribe).
 */
function usePersistedOperations(persisted: PersistedOperations): Plugin {
  return {
    onParams({ params, setParams }) {
      let document: string | undefined;
      try {
        document = persisted.documentFor(params);
      } catch (error) {
        throw toGraphQLError(error as DeliveryGraphError);
      }
      if (document !== undefined) setParams({ ...params, query: document });
    },
    onParse({ params }) {
      const text = typeof params.source === 'string' ? params.source : params.source.body;
      if (!persisted.allows(text)) throw toGraphQLError(new PersistedQueryNotFoundError());
    },
  };
}

/**
 * RATE_LIMIT_PER_MINUTE per merchant key, counted per operation run (query,
 * mutation or subscription) on any transport; the refusal is a GraphQL error
 * with code RATE_LIMITED and no key in it. Requests without a key are refused
 * UNAUTHENTICATED before any upstream call, so they take no token.
 */
function useRateLimit(limiter: KeyRateLimiter): Plugin {
  const refusal = (context: unknown): ExecutionResult | undefined => {
    const key = (context as GraphQLContext | undefined)?.key;
    if (!key) return undefined;
    const retryAfterSeconds = limiter.take(key);
    if (retryAfterSeconds === 0) return undefined;
    return { errors: [toGraphQLError(new RateLimitedError(retryAfterSeconds), { retryAfterSeconds })] };
  };
  return {
    onExecute({ args, setResultAndStopExecution }) {
      const refused = refusal(args.contextValue);
      if (refused) setResultAndStopExecution(refused);
    },
    onSubscribe({ args, setResultAndStopExecution }) {
      const refused = refusal(args.contextValue);
      if (refused) setResultAndStopExecution(refused);
    },
  };
}

export interface ProtectionOptions {
  config: Config;
  limiter: KeyRateLimiter;
  persisted: PersistedOperations | undefined;
}

/** The plugins, in the order they must run: cheap refusals first. */
export function protectionPlugins({ config, limiter, persisted }: ProtectionOptions): Plugin[] {
  return [
    useRefuseSimplePosts(),
    ...(persisted ? [usePersistedOperations(persisted)] : []),
    maxTokensPlugin({ n: OPERATION_LIMITS.tokens }),
    useFieldRepeatLimit(OPERATION_LIMITS.fieldRepeats),
    maxDepthPlugin({ n: OPERATION_LIMITS.depth, ...asValidationError }),
    // __typename aliases count too (armor exempts them by default).
    maxAliasesPlugin({ n: OPERATION_LIMITS.aliases, allowList: [], ...asValidationError }),
    maxDirectivesPlugin({ n: OPERATION_LIMITS.directives, ...asValidationError }),
    costLimitPlugin({ maxCost: OPERATION_LIMITS.cost, ...asValidationError }),
    ...(config.graphql.introspection ? [] : [useNoIntrospection(), useHideSuggestions()]),
    ...(limiter.perMinute > 0 ? [useRateLimit(limiter)] : []),
  ] as Plugin[];
}
