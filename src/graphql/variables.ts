// Variable errors worded as graphql-js words them. graphql-jit (which runs every
// operation) coerces variables itself and refuses a bad one naming the wrong
// variable ("$tip" for `input.tip`), without the scalar's explanation and
// without a code. This plugin leaves jit's coercion in charge and, only when it
// refused an operation, asks graphql-js's coercion why, on every transport (an
// envelop plugin: the direct JSON path, yoga's handler, SSE and graphql-ws all
// run it), and answers that with BAD_USER_INPUT.
import { createRequire } from 'node:module';
import { getOperationAST, type ExecutionArgs, type ExecutionResult, type GraphQLError } from 'graphql';
import { createGraphQLError, type Plugin } from 'graphql-yoga';
import type { ErrorCode } from '../errors.js';

// The graphql instance that built the schema (the CommonJS one every package
// shares; a test runner may hand this module the ES build instead, whose type
// checks would fail on the schema's types). See argumentsOf in graphql/events.ts.
const graphql = createRequire(import.meta.url)('graphql') as typeof import('graphql');

/** As many as graphql-js's own execute reports before it gives up. */
const MAX_VARIABLE_ERRORS = 50;

const BAD_USER_INPUT: ErrorCode = 'BAD_USER_INPUT';

/**
 * graphql-js keeps a scalar's own GraphQLError message ("Decimal must be …") but
 * prefixes any other error with `Expected type "Decimal". `. When the scalar's
 * error comes from another copy of graphql (a test runner loading the ES build),
 * it is taken for "any other error": undo that, so the message reads the same
 * wherever the code runs. Returns graphql-js's message otherwise.
 */
function messageOf(error: GraphQLError): string {
  const wrapped = error.originalError as (Error & { originalError?: Error }) | undefined;
  const scalarError = wrapped?.originalError;
  if (!wrapped || scalarError?.name !== 'GraphQLError' || scalarError instanceof graphql.GraphQLError) return error.message;
  if (!wrapped.message.startsWith('Expected type "') || !wrapped.message.endsWith(`. ${scalarError.message}`) || !error.message.endsWith(wrapped.message)) return error.message;
  return `${error.message.slice(0, error.message.length - wrapped.message.length)}${scalarError.message}`;
}

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
    const { errors } = graphql.getVariableValues(args.schema, definitions, (args.variableValues ?? {}) as Record<string, unknown>, {
      maxErrors: MAX_VARIABLE_ERRORS,
      hideSuggestions,
    });
    if (!errors) return undefined;
    // New errors, without graphql-js's originalError: a scalar's error may come from another graphql copy,
    // which yoga would take for an unexpected error and mask.
    return { errors: errors.map((error) => createGraphQLError(messageOf(error), { nodes: error.nodes, extensions: { code: BAD_USER_INPUT } })) };
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
