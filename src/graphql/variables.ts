// Variable errors worded as graphql-js words them. graphql-jit (which runs every
// operation) coerces variables itself and refuses a bad one naming the wrong
// variable ("$tip" for `input.tip`), without the scalar's explanation and
// without a code. This plugin leaves jit's coercion in charge and, only when it
// refused an operation, asks graphql-js's coercion why, on every transport (an
// envelop plugin: the direct JSON path, yoga's handler, SSE and graphql-ws all
// run it), and answers that with BAD_USER_INPUT.
//
// It also mends one place where graphql-jit's coercion differs from the spec:
// a required variable with a default (`$ttlSeconds: Int! = 3600`) left out of
// the request must take its default, and jit refuses it as "not provided".
import { getOperationAST, getVariableValues, Kind, valueFromASTUntyped, type DocumentNode, type ExecutionArgs, type ExecutionResult } from 'graphql';
import { createGraphQLError, type Plugin } from 'graphql-yoga';
import type { ErrorCode } from '../errors.js';

/** As many as graphql-js's own execute reports before it gives up. */
const MAX_VARIABLE_ERRORS = 50;

const BAD_USER_INPUT: ErrorCode = 'BAD_USER_INPUT';

/** Whether a result is a refusal before anything ran: errors and no data at all (field errors come with data, even null). */
function refusedBeforeRunning(result: unknown): result is ExecutionResult {
  return typeof result === 'object' && result !== null && !('data' in result) && Array.isArray((result as ExecutionResult).errors);
}

/** A required variable's default, as a client would have sent it. */
interface RequiredDefault {
  operation: string | undefined;
  variable: string;
  value: unknown;
}

/** Per parsed document (documents are cached, so this is computed once each): its required variables with defaults. */
const requiredDefaults = new WeakMap<DocumentNode, RequiredDefault[]>();

function requiredDefaultsOf(document: DocumentNode): RequiredDefault[] {
  let found = requiredDefaults.get(document);
  if (found) return found;
  found = [];
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
    for (const variable of definition.variableDefinitions ?? []) {
      // Only `Type! = default`: jit applies the default of a nullable variable itself.
      if (variable.defaultValue && variable.type.kind === Kind.NON_NULL_TYPE) {
        found.push({ operation: definition.name?.value, variable: variable.variable.name.value, value: valueFromASTUntyped(variable.defaultValue) });
      }
    }
  }
  requiredDefaults.set(document, found);
  return found;
}

/** The variables with the defaults of the left-out required ones filled in; the same object when none is missing. */
function withRequiredDefaults(args: ExecutionArgs): ExecutionArgs['variableValues'] {
  const defaults = requiredDefaultsOf(args.document);
  if (defaults.length === 0) return args.variableValues;
  const given = args.variableValues ?? {};
  const several = defaults.some((entry) => entry.operation !== defaults[0]!.operation);
  const operation = several ? getOperationAST(args.document, args.operationName ?? undefined)?.name?.value : defaults[0]!.operation;
  let filled: Record<string, unknown> | undefined;
  for (const entry of defaults) {
    if (entry.operation !== operation || Object.prototype.hasOwnProperty.call(given, entry.variable)) continue;
    filled ??= { ...given };
    filled[entry.variable] = entry.value;
  }
  return filled ?? args.variableValues;
}

export interface VariableErrorOptions {
  /** Leave out "Did you mean …?" (field and enum names), as validation does when introspection is off. */
  hideSuggestions: boolean;
}

/**
 * Answers an operation whose variables do not fit their declared types: a
 * missing required one, a value of the wrong type, a bad value deep inside an
 * input object (`Variable "$input" got invalid value "abc" at "input.tip"; …`).
 * The answer is an execution result without data whose errors carry
 * extensions.code BAD_USER_INPUT (HTTP 200, as graphql-js over yoga answers it).
 * An operation that runs costs one look at its result: graphql-js coerces the
 * variables again only after graphql-jit refused them (coercing every request
 * up front cost about 1.5 µs of a single read's ~140 µs of CPU). When graphql-js
 * finds nothing wrong, the refusal is left as it is.
 */
export function useVariableErrors({ hideSuggestions }: VariableErrorOptions): Plugin {
  /** graphql-js's errors for these arguments' variables, with our code; undefined when it finds none. */
  const variableErrors = (args: ExecutionArgs): ExecutionResult | undefined => {
    const definitions = getOperationAST(args.document, args.operationName ?? undefined)?.variableDefinitions;
    if (!definitions || definitions.length === 0) return undefined;
    const { errors } = getVariableValues(args.schema, definitions, (args.variableValues ?? {}) as Record<string, unknown>, {
      maxErrors: MAX_VARIABLE_ERRORS,
      hideSuggestions,
    });
    if (!errors) return undefined;
    // New errors with our code and without graphql-js's originalError, which yoga would mask
    // as an unexpected error when a scalar threw anything but a GraphQLError.
    return { errors: errors.map((error) => createGraphQLError(error.message, { nodes: error.nodes, extensions: { code: BAD_USER_INPUT } })) };
  };
  const reword = ({ args, result, setResult }: { args: ExecutionArgs; result: unknown; setResult: (result: ExecutionResult) => void }) => {
    if (!refusedBeforeRunning(result)) return;
    const answer = variableErrors(args);
    if (answer) setResult(answer);
  };
  // The same two objects for every operation: nothing is made per request.
  const afterExecute = { onExecuteDone: reword };
  const afterSubscribe = { onSubscribeResult: reword };
  return {
    // In place: a later plugin (graphql-jit's) replaces the execute function, and envelop
    // hands these same arguments to whichever runs.
    onExecute: ({ args }) => {
      args.variableValues = withRequiredDefaults(args);
      return afterExecute;
    },
    onSubscribe: ({ args }) => {
      args.variableValues = withRequiredDefaults(args);
      return afterSubscribe;
    },
  };
}
