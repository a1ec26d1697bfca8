// Variable errors worded as graphql-js words them. graphql-jit (which runs every
// operation) coerces variables itself and refuses a bad one naming the wrong
// variable ("$tip" for `input.tip`), without the scalar's explanation and
// without a code. This plugin leaves jit's coercion in charge and, only when it
// refused an operation, asks graphql-js's coercion why, on every transport (an
// envelop plugin: the direct JSON path, yoga's handler, SSE and graphql-ws all
// run it), and answers that with BAD_USER_INPUT.
import { getOperationAST, getVariableValues, type ExecutionArgs, type ExecutionResult } from 'graphql';
import { createGraphQLError, type Plugin } from 'graphql-yoga';
import type { ErrorCode } from '../errors.js';

/** As many as graphql-js's own execute reports before it gives up. */
const MAX_VARIABLE_ERRORS = 50;

const BAD_USER_INPUT: ErrorCode = 'BAD_USER_INPUT';

/** Whether a result is a refusal before anything ran: errors and no data at all (field errors come with data, even null). */
function refusedBeforeRunning(result: unknown): result is ExecutionResult {
  return typeof result === 'object' && result !== null && !('data' in result) && Array.isArray((result as ExecutionResult).errors);
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
    onExecute: () => afterExecute,
    onSubscribe: () => afterSubscribe,
  };
}
