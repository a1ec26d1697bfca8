// What a GraphQL request may ask for before it runs. These are envelop plugins in
// yoga's plugin list, so yoga's full handler, the direct JSON path
// (graphql/http.ts) and graphql-ws (realtime/ws.ts) all run them through
// yoga.getEnveloped(). Only the yoga-level hooks (onRequest, onParams) reach
// yoga's own handler alone; each says below how the other paths are covered.
import { maxAliasesPlugin } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { maxDirectivesPlugin } from '@escape.tech/graphql-armor-max-directives';
import { maxTokensPlugin } from '@escape.tech/graphql-armor-max-tokens';
import {
  getOperationAST,
  Kind,
  type ASTVisitor,
  type DocumentNode,
  type ExecutionArgs,
  type ExecutionResult,
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLError,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValidationContext,
  type ValueNode,
} from 'graphql';
import { createGraphQLError, handleStreamOrSingleExecutionResult, type Plugin } from 'graphql-yoga';
import type { Config } from '../config.js';
import { DeliveryGraphError, PersistedQueryNotFoundError, RateLimitedError, ResponseTooLargeError } from '../errors.js';
import type { GraphQLContext } from './context.js';
import { namesPersistedQuery, persistedQueryStatus, type PersistedOperations } from './persisted-operations.js';
import { useClientTokenScope } from './client-token-scope.js';
import { useNoFederationSdl } from './federation-sdl.js';
import type { Admission, RequestLimits } from './rate-limit.js';
import type { KnownKeys } from '../upstream/known-keys.js';
import { useVariableErrors } from './variables.js';

/**
 * Limits on one operation. The largest operations of the tests and the README
 * (a 100-uid batch of full deliveries, a full page of 500 events, the tracking
 * page's read) stay well inside them; many reads go in one `deliveries(uids:)`
 * list, not in aliases.
 */
export const OPERATION_LIMITS = {
  /** Nested selection levels (introspection's own nesting is not counted; it is off in production). */
  depth: 12,
  aliases: 30,
  /** Lexical tokens of the whole document, checked while parsing. */
  tokens: 2000,
  directives: 20,
  /**
   * The most field values one answer may hold (operationCost): every field counts
   * 1, `deliveries(uids:)` counts its selection once per uid (and federation's
   * `_entities(representations:)` once per representation, by the same rule: a
   * list field with a list argument) and `Delivery.events` its edges once per
   * event of the page. A 100-uid batch of full deliveries costs
   * about 8,600, a full page of 500 events with every field about 8,000; 30
   * aliases of 100 uids × a page of events cost six million.
   */
  cost: 50_000,
  /** Events in one page of `Delivery.events` when `first` is omitted (MAX_PAGE in graphql/events.ts). */
  eventsPage: 500,
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

/**
 * Requests yoga cannot read, answered without echoing them. A body that is not
 * JSON gets "POST body sent invalid JSON." and, in extensions.originalError, the
 * JSON parser's message, which quotes the body back (a key pasted into it, say):
 * the refusal keeps its message, code and status without it. A GET whose
 * `variables` or `extensions` parameter is not JSON throws the parser's own
 * SyntaxError, which would be masked as a 500 "Unexpected error.": it is the
 * client's mistake, so 400 BAD_REQUEST. Only yoga's handler parses such
 * requests: the direct path hands them over.
 */
function useRequestParseErrors(): Plugin {
  const quiet = (error: unknown): never => {
    if (error instanceof SyntaxError) {
      throw createGraphQLError('The variables or extensions parameter is not valid JSON.', { extensions: { code: 'BAD_REQUEST', http: { status: 400 } } });
    }
    const extensions = (error as Partial<GraphQLError> | undefined)?.extensions;
    if (!extensions || !('originalError' in extensions)) throw error;
    const { originalError: _echo, http, ...kept } = extensions as { originalError?: unknown; http?: { status?: number; spec?: boolean } };
    // yoga answers a spec-marked error 200 under application/json unless it carries that originalError:
    // without it, the status stands on its own (400, as the GraphQL-over-HTTP spec wants for a body that does not parse).
    throw createGraphQLError((error as Error).message, { extensions: http ? { ...kept, http: { status: http.status } } : kept });
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
 * variable errors leave them out themselves, see graphql/variables.ts.)
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

/** A GraphQL type as the cost walk reads it (duck-typed: graphql may be loaded twice, see useNoIntrospection). */
interface TypeLike {
  ofType?: TypeLike;
  getFields?: () => Record<string, { type: TypeLike; args: ReadonlyArray<{ name: string; type: TypeLike }> }>;
  readonly [Symbol.toStringTag]?: string;
}

/** Whether a type is a list (under any non-null), and the named type inside. */
function unwrap(type: TypeLike): { list: boolean; named: TypeLike } {
  let list = false;
  let inner = type;
  while (inner.ofType) {
    if (inner[Symbol.toStringTag] === 'GraphQLList') list = true;
    inner = inner.ofType;
  }
  return { list, named: inner };
}

/**
 * How arguments given as variables count: as the request gives them (execution),
 * or, before they are known (validation), at their least (1) or their most (a
 * full batch, a full page).
 */
type VariableValues = Readonly<Record<string, unknown>> | 'least' | 'most';

interface CostWalk {
  schema: GraphQLSchema;
  fragments: ReadonlyMap<string, FragmentDefinitionNode>;
  /** The operation's variable defaults, as written. */
  defaults: ReadonlyMap<string, ValueNode>;
  variables: VariableValues;
  maxBatch: number;
  /** Fragment costs already counted, by name and page size. */
  memo: Map<string, number>;
  /** Set once a multiplier comes from a variable. */
  usesVariables: boolean;
}

/** The items of a list argument: a single value is a list of one. */
function listLength(value: ValueNode, walk: CostWalk): number {
  if (value.kind === Kind.LIST) return value.values.length;
  if (value.kind === Kind.NULL) return 0;
  if (value.kind !== Kind.VARIABLE) return 1;
  walk.usesVariables = true;
  const { variables } = walk;
  if (variables === 'least') return 1;
  if (variables === 'most') return walk.maxBatch;
  const name = value.name.value;
  if (!Object.hasOwn(variables, name)) {
    const fallback = walk.defaults.get(name);
    return fallback ? listLength(fallback, walk) : 0;
  }
  const given = variables[name];
  return Array.isArray(given) ? given.length : given == null ? 0 : 1;
}

/** A page size given as `first` or `last`; undefined when left to the field (a full page). */
function pageSize(value: ValueNode | undefined, walk: CostWalk): number | undefined {
  if (value?.kind === Kind.INT) return Math.max(0, Number.parseInt(value.value, 10));
  if (value?.kind !== Kind.VARIABLE) return undefined;
  walk.usesVariables = true;
  const { variables } = walk;
  if (variables === 'least') return 1;
  if (variables === 'most') return undefined;
  const name = value.name.value;
  if (!Object.hasOwn(variables, name)) return pageSize(walk.defaults.get(name), walk);
  const given = variables[name];
  return typeof given === 'number' && Number.isFinite(given) ? Math.max(0, Math.trunc(given)) : undefined;
}

/** The types introspection's root fields return (they are not among the schema's own fields). */
const INTROSPECTION_TYPES: Readonly<Record<string, string>> = { __schema: '__Schema', __type: '__Type' };

/**
 * One field: itself and everything under it, times the entries it holds. A list
 * field with a list argument (`deliveries(uids:)`) holds one entry per item; a
 * field with `first`/`last` (`Delivery.events`) passes its page size to its list
 * fields (the connection's `edges`), a full page when it is not given. Other lists
 * (a package's items, both groups' availability) hold as many entries as their
 * parent passes down, 1 elsewhere.
 */
function fieldCost(node: FieldNode, parent: TypeLike | undefined, page: number, walk: CostWalk): number {
  const name = node.name.value;
  const field = parent?.getFields?.()[name];
  if (!field) {
    // __typename, and introspection's root fields, whose lists count once.
    if (!node.selectionSet) return 1;
    const type = walk.schema.getType(INTROSPECTION_TYPES[name] ?? '') as TypeLike | null | undefined;
    return 1 + selectionCost(node.selectionSet, type ?? undefined, 1, walk);
  }
  const { list, named } = unwrap(field.type);
  const argument = (argName: string) => node.arguments?.find((arg) => arg.name.value === argName)?.value;
  const paged = field.args.some((arg) => arg.name === 'first' || arg.name === 'last');
  const ownPage = paged ? (pageSize(argument('first') ?? argument('last'), walk) ?? OPERATION_LIMITS.eventsPage) : 1;
  let times = 1;
  if (list) {
    const listArg = field.args.find((arg) => unwrap(arg.type).list);
    const items = listArg && argument(listArg.name);
    times = items ? listLength(items, walk) : paged ? ownPage : page;
  }
  const inner = node.selectionSet ? selectionCost(node.selectionSet, named, list ? 1 : ownPage, walk) : 0;
  return times * (1 + inner);
}

function selectionCost(set: SelectionSetNode, type: TypeLike | undefined, page: number, walk: CostWalk): number {
  let cost = 0;
  for (const selection of set.selections) {
    if (selection.kind === Kind.FIELD) {
      cost += fieldCost(selection, type, page, walk);
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      const on = selection.typeCondition ? (walk.schema.getType(selection.typeCondition.name.value) as TypeLike | undefined) : type;
      cost += selectionCost(selection.selectionSet, on, page, walk);
    } else {
      const fragment = walk.fragments.get(selection.name.value);
      if (!fragment) continue;
      const key = `${fragment.name.value} ${page}`;
      let fragmentCost = walk.memo.get(key);
      if (fragmentCost === undefined) {
        fragmentCost = selectionCost(fragment.selectionSet, walk.schema.getType(fragment.typeCondition.name.value) as TypeLike | undefined, page, walk);
        walk.memo.set(key, fragmentCost);
      }
      cost += fragmentCost;
    }
  }
  return cost;
}

/**
 * The most field values an operation's answer may hold (OPERATION_LIMITS.cost),
 * for a valid document: fragments are counted where they are spread, and a
 * type's fields under every type condition (an upper bound for unions).
 */
export function operationCost(
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  variables: VariableValues,
  maxBatch: number,
): { cost: number; usesVariables: boolean } {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const defaults = new Map<string, ValueNode>();
  for (const definition of operation.variableDefinitions ?? []) if (definition.defaultValue) defaults.set(definition.variable.name.value, definition.defaultValue);
  const walk: CostWalk = { schema, fragments, defaults, variables, maxBatch, memo: new Map(), usesVariables: false };
  const root = operation.operation === 'query' ? schema.getQueryType() : operation.operation === 'mutation' ? schema.getMutationType() : schema.getSubscriptionType();
  const cost = selectionCost(operation.selectionSet, (root ?? undefined) as TypeLike | undefined, 1, walk);
  return { cost, usesVariables: walk.usesVariables };
}

/** What one operation may cost before its variables are known. */
interface CostPlan {
  /** With every variable multiplier at 1: over the limit, no variables can save it. */
  least: number;
  /** Whether a multiplier comes from a variable (then `least` is only a bound). */
  usesVariables: boolean;
  /** With every variable multiplier at its most: within the limit, no variables can break it. */
  most: number;
}

function costRefusal(cost: number, limit: number, validation: boolean, node?: OperationDefinitionNode, atLeast = false): GraphQLError {
  const message =
    `Operation cost limit of ${limit} exceeded, found ${atLeast ? 'at least ' : ''}${cost}: every field counts once per value the answer can hold, ` +
    `deliveries(uids:) once per uid, _entities(representations:) once per representation and Delivery.events once per event of its page (first, or ${OPERATION_LIMITS.eventsPage} without it). ` +
    'Ask for fewer uids, fields or events.';
  // The same marks yoga gives every validation error (HTTP 400), which an HTTP answer keeps to itself;
  // refused once the variables are known, the answer is an execution result and carries only the code.
  const extensions = validation ? { code: 'GRAPHQL_VALIDATION_FAILED', http: { spec: true, status: 400 } } : { code: 'GRAPHQL_VALIDATION_FAILED' };
  return createGraphQLError(message, { nodes: node, extensions });
}

/**
 * OPERATION_LIMITS.cost, in two steps that both come before any resolver runs.
 * Validation refuses what no variables can bring within the limit (a validation
 * error, cached with the document like every other); an operation that only
 * some variables put over it (`deliveries(uids: $uids)` with a long list) is
 * counted again with its variables when it executes, and refused with the same
 * message. Replaces graphql-armor's cost rule, which multiplies only by literal
 * `first`/`last`: a list argument, a variable or an omitted `first` counted once.
 */
function useCostLimit(limit: number, maxBatch: number): Plugin {
  const plans = new WeakMap<DocumentNode, Map<OperationDefinitionNode, CostPlan>>();
  const planOf = (schema: GraphQLSchema, document: DocumentNode): Map<OperationDefinitionNode, CostPlan> => {
    let byOperation = plans.get(document);
    if (!byOperation) {
      byOperation = new Map();
      for (const definition of document.definitions) {
        if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
        const least = operationCost(schema, document, definition, 'least', maxBatch);
        const most = least.usesVariables ? operationCost(schema, document, definition, 'most', maxBatch).cost : least.cost;
        byOperation.set(definition, { least: least.cost, usesVariables: least.usesVariables, most });
      }
      plans.set(document, byOperation);
    }
    return byOperation;
  };
  const withVariables = ({ args, setResultAndStopExecution }: { args: ExecutionArgs; setResultAndStopExecution: (result: ExecutionResult) => void }) => {
    const operation = getOperationAST(args.document, args.operationName ?? undefined);
    const plan = operation && planOf(args.schema, args.document).get(operation);
    if (!operation || !plan || plan.most <= limit) return;
    const { cost } = operationCost(args.schema, args.document, operation, (args.variableValues ?? {}) as Record<string, unknown>, maxBatch);
    if (cost > limit) setResultAndStopExecution({ errors: [costRefusal(cost, limit, false)] });
  };
  return {
    onValidate({ params: { schema, documentAST } }) {
      // After the standard rules: only valid documents are counted (no fragment cycles, no unknown fields).
      return ({ valid, result, setResult }) => {
        if (!valid) return;
        for (const [operation, plan] of planOf(schema, documentAST)) {
          if (plan.least > limit) return void setResult([...result, costRefusal(plan.least, limit, true, operation, plan.usesVariables)]);
        }
      };
    },
    onExecute: withVariables,
    onSubscribe: withVariables,
  };
}

/**
 * Set in the initial context by a caller that checks the bytes of the text it
 * writes itself (the direct JSON path): useResponseSizeLimit only counts first.
 */
export const CHECKS_RESPONSE_SIZE = Symbol('delivery-graph.checks-response-size');

/** The whole answer that replaces one over GRAPHQL_MAX_RESPONSE_BYTES. */
export function responseTooLarge(maxBytes: number): ExecutionResult {
  return { errors: [toGraphQLError(new ResponseTooLargeError(maxBytes))], data: null };
}

/** Whether a JSON text takes more than `maxBytes` bytes in UTF-8 (measured only when its length leaves a doubt). */
export function textOver(text: string, maxBytes: number): boolean {
  if (text.length * 3 <= maxBytes) return false;
  return text.length > maxBytes || Buffer.byteLength(text) > maxBytes;
}

/**
 * Whether `value` written as JSON takes more than `maxBytes` bytes, counted
 * without writing it and given up as soon as it is over, so a huge answer costs
 * no more than the limit. Short strings count one byte per character and escapes
 * are not counted: a close estimate, which the exact check on the written text
 * completes on HTTP.
 */
export function jsonOver(value: unknown, maxBytes: number): boolean {
  let bytes = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'string') {
      // A long string may be multi-byte text: its UTF-8 length is worth measuring.
      bytes += (item.length > 256 ? Buffer.byteLength(item) : item.length) + 2;
    } else if (typeof item === 'number') {
      bytes += 8;
    } else if (typeof item === 'boolean' || item === null) {
      bytes += 5;
    } else if (typeof item === 'object') {
      // GraphQLError and Date write themselves.
      if (typeof (item as { toJSON?: unknown }).toJSON === 'function') {
        pending.push((item as { toJSON(): unknown }).toJSON());
        continue;
      }
      if (Array.isArray(item)) {
        bytes += item.length + 1;
        for (let index = 0; index < item.length; index += 1) pending.push(item[index]);
      } else {
        bytes += 2;
        for (const key in item) {
          const entry = (item as Record<string, unknown>)[key];
          // Left out of JSON, as JSON.stringify does (graphql-jit's `stringify` among them).
          if (entry === undefined || typeof entry === 'function') continue;
          bytes += key.length + 4;
          pending.push(entry);
        }
      }
    }
    if (bytes > maxBytes) return true;
  }
  return false;
}

/**
 * GRAPHQL_MAX_RESPONSE_BYTES on every way out. Each result is measured before
 * it is written, by a count that stops at the limit (jsonOver): an answer that
 * repeats one payload thousands of times is refused in about a millisecond,
 * where writing it would hold the event loop for as long as 100 MB of JSON takes
 * (a single read costs about a microsecond more). Then the exact bytes of the
 * written text are checked where there is one: the direct JSON path checks its
 * own (graphql/http.ts, which marks its context); yoga's handler writes each
 * result, SSE events included, with the result's `stringify` when it has one,
 * so wrapping that checks the very text that goes out. graphql-ws writes its
 * messages with JSON.stringify, out of reach: there the count is the check.
 */
function useResponseSizeLimit(maxBytes: number): Plugin {
  let refusalText: string | undefined;
  const refusal = () => (refusalText ??= JSON.stringify(responseTooLarge(maxBytes)));
  type Result = ExecutionResult & { stringify?: (result: ExecutionResult) => string };
  const bound = (context: Record<PropertyKey, unknown>, result: Result, setResult: (result: ExecutionResult) => void) => {
    if (jsonOver(result, maxBytes)) return setResult(responseTooLarge(maxBytes));
    if (!('request' in context) || context[CHECKS_RESPONSE_SIZE]) return;
    const write = result.stringify ?? ((value: ExecutionResult) => JSON.stringify(value));
    result.stringify = (value) => {
      let text: string;
      try {
        text = write(value);
      } catch (error) {
        // Longer than the longest string V8 can make: far over any limit.
        if (error instanceof RangeError && /string length/i.test(error.message)) return refusal();
        throw error;
      }
      return textOver(text, maxBytes) ? refusal() : text;
    };
  };
  const watch = (context: unknown) => {
    const known = (context ?? {}) as Record<PropertyKey, unknown>;
    return (payload: Parameters<typeof handleStreamOrSingleExecutionResult>[0]) =>
      handleStreamOrSingleExecutionResult(payload, ({ result, setResult }) => bound(known, result as Result, setResult));
  };
  return {
    onExecute: ({ args }) => ({ onExecuteDone: watch(args.contextValue) }),
    onSubscribe: ({ args }) => ({ onSubscribeResult: watch(args.contextValue) }),
  };
}

/** A refused persisted query as a GraphQL error, with the HTTP status yoga answers it with (see persistedQueryStatus). */
export function persistedQueryError(error: DeliveryGraphError): GraphQLError {
  const status = persistedQueryStatus(error);
  return toGraphQLError(error, status === 200 ? {} : { http: { status } });
}

/**
 * Persisted queries: onParams turns a hash into its query text for yoga's
 * handler (the direct path and graphql-ws call the same resolve themselves);
 * onValidate remembers a query sent with its hash once it passed validation, on
 * every transport; onParse enforces PERSISTED_OPERATIONS_FILE, so with it an
 * unlisted document is refused everywhere before it is even parsed.
 */
function usePersistedOperations(persisted: PersistedOperations, keys: KnownKeys): Plugin {
  /** A query that ran with its hash is remembered only for a caller whose merchant key the upstream accepted (a client token's included). */
  const accepted = (context: unknown): boolean => {
    const { key, clientToken } = context as GraphQLContext;
    return key !== undefined && clientToken !== null && keys.standing(key) === 'accepted';
  };
  // After the operation ran (so its document was valid, and any upstream call has judged the key).
  const remember = (context: unknown) => {
    const params = (context as { params?: unknown }).params;
    if (!persisted.awaitsRegistration(params)) return undefined;
    return () => persisted.ran(params, accepted(context));
  };
  return {
    onParams({ params, setParams }) {
      // Synchronous for the common request, which names no persisted query.
      if (!namesPersistedQuery(params)) return;
      return persisted.resolve(params).then(
        (resolved) => setParams(resolved),
        (error: unknown) => {
          throw error instanceof DeliveryGraphError ? persistedQueryError(error) : error;
        },
      );
    },
    onParse({ params }) {
      if (!persisted.allowlisted) return;
      const text = typeof params.source === 'string' ? params.source : params.source.body;
      if (!persisted.allows(text)) throw toGraphQLError(new PersistedQueryNotFoundError());
    },
    onExecute({ args }) {
      const done = remember(args.contextValue);
      return done && { onExecuteDone: done };
    },
    onSubscribe({ args }) {
      const done = remember(args.contextValue);
      return done && { onSubscribeResult: done };
    },
  };
}

/**
 * The request limits of graphql/rate-limit.ts, per operation run (query,
 * mutation or subscription) on any transport, before any upstream call:
 * RATE_LIMIT_PER_MINUTE per merchant key, AUTH_FAILURES_PER_MINUTE tries of
 * keys the upstream has not accepted per client address, and UNAUTHENTICATED
 * for a key it refused a moment ago. The refusal is a GraphQL error with its
 * code (RATE_LIMITED with retryAfterSeconds) and no key in it. Requests without
 * a key are refused UNAUTHENTICATED by the resolvers, so they take nothing.
 */
function useRateLimit(limits: RequestLimits): Plugin {
  const refused = (refusal: DeliveryGraphError): ExecutionResult => ({
    errors: [toGraphQLError(refusal, refusal instanceof RateLimitedError ? { retryAfterSeconds: refusal.retryAfterSeconds } : {})],
  });
  const admit = (context: unknown) => {
    const { key, clientAddress } = context as GraphQLContext;
    return limits.admit(key, clientAddress);
  };
  return {
    onExecute({ args, setResultAndStopExecution }) {
      const decide = ({ refusal, done }: Admission) => {
        if (refusal) return void setResultAndStopExecution(refused(refusal));
        if (done) return { onExecuteDone: () => done() };
      };
      const admission = admit(args.contextValue);
      return admission instanceof Promise ? admission.then(decide) : decide(admission);
    },
    onSubscribe({ args, setResultAndStopExecution }) {
      const decide = ({ refusal, done }: Admission) => {
        if (refusal) return void setResultAndStopExecution(refused(refusal));
        if (done) return { onSubscribeResult: () => done() };
      };
      const admission = admit(args.contextValue);
      return admission instanceof Promise ? admission.then(decide) : decide(admission);
    },
  };
}

export interface ProtectionOptions {
  config: Config;
  limiter: RequestLimits;
  persisted: PersistedOperations;
}

/** The plugins, in the order they must run: cheap refusals first. */
export function protectionPlugins({ config, limiter, persisted }: ProtectionOptions): Plugin[] {
  return [
    useRefuseSimplePosts(),
    useRequestParseErrors(),
    usePersistedOperations(persisted, limiter.keys),
    maxTokensPlugin({ n: OPERATION_LIMITS.tokens }),
    useFieldRepeatLimit(OPERATION_LIMITS.fieldRepeats),
    maxDepthPlugin({ n: OPERATION_LIMITS.depth, ...asValidationError }),
    // __typename aliases count too (armor exempts them by default).
    maxAliasesPlugin({ n: OPERATION_LIMITS.aliases, allowList: [], ...asValidationError }),
    maxDirectivesPlugin({ n: OPERATION_LIMITS.directives, ...asValidationError }),
    useCostLimit(OPERATION_LIMITS.cost, config.graphql.maxBatchSize),
    useResponseSizeLimit(config.graphql.maxResponseBytes),
    ...(config.graphql.introspection ? [] : [useNoIntrospection(), useHideSuggestions()]),
    ...(config.graphql.federationSdl ? [] : [useNoFederationSdl()]),
    // A client token's refusals (mutations, other root fields) cost its merchant key nothing.
    useClientTokenScope(),
    useRateLimit(limiter),
    // Last: it rewords graphql-jit's refusal of bad variables, and only what ran up to jit reaches it.
    useVariableErrors({ hideSuggestions: !config.graphql.introspection }),
  ] as Plugin[];
}
