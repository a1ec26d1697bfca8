// What a client token may do, enforced once for every transport (an envelop
// plugin, before any resolver and so before any upstream call): read its own
// deliveries and follow their events. Any mutation, any other root field, is
// refused FORBIDDEN; the uids it was not given read as not found (the loader and
// the streams check those, see context.ts and realtime/streams.ts). A stream
// ends when the token expires.
import { getOperationAST, Kind, type DocumentNode, type ExecutionResult, type FragmentDefinitionNode, type SelectionSetNode } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { ForbiddenError, UnauthenticatedError } from '../errors.js';
import type { GraphQLContext } from './context.js';
import { toGraphQLError } from './protection.js';

/** Root fields a client token may select, by operation type. Introspection stays as GRAPHQL_INTROSPECTION says. */
const ALLOWED_ROOT_FIELDS = {
  query: new Set(['delivery', 'deliveries', 'node', 'clientToken', '_entities', '__typename', '__schema', '__type']),
  subscription: new Set(['deliveryUpdated', 'courierLocation', 'deliveryEvents', '__typename']),
} as const;

/** Every field selected at the root, through fragments and inline fragments (whatever @skip/@include say: refusing more is safe). */
function rootFields(selectionSet: SelectionSetNode, fragments: Map<string, FragmentDefinitionNode>, names = new Set<string>(), seen = new Set<string>()): Set<string> {
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD) names.add(selection.name.value);
    else if (selection.kind === Kind.INLINE_FRAGMENT) rootFields(selection.selectionSet, fragments, names, seen);
    else if (!seen.has(selection.name.value)) {
      seen.add(selection.name.value);
      const fragment = fragments.get(selection.name.value);
      if (fragment) rootFields(fragment.selectionSet, fragments, names, seen);
    }
  }
  return names;
}

/** Why a client token may not run this operation; undefined when it may. */
function refusal(document: DocumentNode, operationName: string | null | undefined): ForbiddenError | undefined {
  const operation = getOperationAST(document, operationName);
  // No such operation: graphql-js answers that itself.
  if (!operation) return undefined;
  if (operation.operation === 'mutation') return new ForbiddenError('A client token may only read its deliveries; mutations need the merchant key.');
  const allowed = ALLOWED_ROOT_FIELDS[operation.operation];
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const others = [...rootFields(operation.selectionSet, fragments)].filter((name) => !allowed.has(name));
  if (others.length === 0) return undefined;
  return new ForbiddenError(`A client token may not use ${others.map((name) => `${operation.operation === 'query' ? 'Query' : 'Subscription'}.${name}`).join(', ')}; it reads its own deliveries only.`);
}

const EXPIRED = Symbol('expired');

/**
 * The stream until `expiresAt`, then one last message saying the token expired,
 * then done. An iterator object rather than an async generator, so that a client
 * that unsubscribes ends the source at once, not after its next event.
 */
function untilExpiry<T>(source: AsyncIterable<T>, expiresAt: Date, expired: () => T): AsyncIterableIterator<T> {
  const iterator = source[Symbol.asyncIterator]();
  let finished = false;
  let timer: NodeJS.Timeout | undefined;
  const expiry = new Promise<typeof EXPIRED>((resolve) => {
    timer = setTimeout(() => resolve(EXPIRED), Math.max(0, expiresAt.getTime() - Date.now()));
  });
  const finish = async () => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    await iterator.return?.();
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    async next() {
      if (finished) return { done: true, value: undefined };
      const step = await Promise.race([iterator.next(), expiry]);
      if (step === EXPIRED) {
        await finish();
        return { done: false, value: expired() };
      }
      if (step.done) {
        finished = true;
        clearTimeout(timer);
      }
      return step;
    },
    async return(value?: unknown) {
      await finish();
      return { done: true, value: value as T };
    },
    async throw(error?: unknown) {
      await finish();
      throw error;
    },
  };
}

export function useClientTokenScope(): Plugin {
  const refuse = (error: ForbiddenError): ExecutionResult => ({ errors: [toGraphQLError(error)] });
  return {
    onExecute({ args, setResultAndStopExecution }) {
      if (!(args.contextValue as unknown as GraphQLContext).clientToken) return;
      const why = refusal(args.document, args.operationName);
      if (why) setResultAndStopExecution(refuse(why));
    },
    onSubscribe({ args, setResultAndStopExecution }) {
      const token = (args.contextValue as unknown as GraphQLContext).clientToken;
      if (!token) return;
      const why = refusal(args.document, args.operationName);
      if (why) return void setResultAndStopExecution(refuse(why));
      return {
        onSubscribeResult({ result, setResult }) {
          if (!(Symbol.asyncIterator in result)) return;
          const expired = (): ExecutionResult => ({ errors: [toGraphQLError(new UnauthenticatedError('The client token has expired; ask the merchant for a new one.'))] });
          setResult(untilExpiry(result, token.expiresAt, expired));
        },
      };
    },
  };
}
