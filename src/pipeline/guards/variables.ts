// Variable errors worded as graphql-js words them. graphql-jit coerces variables
// itself and refuses a bad one naming the wrong variable ("$tip" for
// `input.tip`), without the scalar's explanation and without a code. The plan's
// executor leaves jit's coercion in charge and, only when it refused an
// operation, asks graphql-js's coercion why, and answers that with
// BAD_USER_INPUT. It also mends one place where jit's coercion differs from the
// spec: a required variable with a default (`$ttlSeconds: Int! = 3600`) left out
// of the request must take its default, and jit refuses it as "not provided".
import {
  getVariableValues,
  Kind,
  valueFromASTUntyped,
  type ExecutionResult,
  type GraphQLSchema,
  type OperationDefinitionNode,
} from 'graphql';
import { createGraphQLError } from 'graphql-yoga';
import type { ErrorCode } from '../../errors.js';

/** As many as graphql-js's own execute reports before it gives up. */
const MAX_VARIABLE_ERRORS = 50;

const BAD_USER_INPUT: ErrorCode = 'BAD_USER_INPUT';

/**
 * Whether a result is a refusal before anything ran: errors and no data at all (field errors come with data, even
 * null).
 */
export function refusedBeforeRunning(result: unknown): result is ExecutionResult {
  return (
    typeof result === 'object' &&
    result !== null &&
    !('data' in result) &&
    Array.isArray((result as ExecutionResult).errors)
  );
}

/** An operation's required variables that have a default, with the default as a client would have sent it. */
export function requiredDefaultsOf(operation: OperationDefinitionNode): ReadonlyArray<readonly [string, unknown]> {
  const found: Array<readonly [string, unknown]> = [];
  for (const variable of operation.variableDefinitions ?? []) {
    // Only `Type! = default`: jit applies the default of a nullable variable itself.
    if (variable.defaultValue && variable.type.kind === Kind.NON_NULL_TYPE)
      found.push([variable.variable.name.value, valueFromASTUntyped(variable.defaultValue)]);
  }
  return found;
}

/** The variables with the defaults of the left-out required ones filled in; the same object when none is missing. */
export function withRequiredDefaults(
  defaults: ReadonlyArray<readonly [string, unknown]>,
  given: Readonly<Record<string, unknown>> | undefined,
): Readonly<Record<string, unknown>> | undefined {
  let filled: Record<string, unknown> | undefined;
  for (const [name, value] of defaults) {
    if (given && Object.prototype.hasOwnProperty.call(given, name)) continue;
    filled ??= { ...given };
    filled[name] = value;
  }
  return filled ?? given;
}

/**
 * graphql-js's errors for these variables, with our code; undefined when it
 * finds none (then jit's refusal is left as it is).
 */
export function variableErrors(
  schema: GraphQLSchema,
  operation: OperationDefinitionNode,
  variables: Readonly<Record<string, unknown>> | undefined,
  hideSuggestions: boolean,
): ExecutionResult | undefined {
  const definitions = operation.variableDefinitions;
  if (!definitions || definitions.length === 0) return undefined;
  const { errors } = getVariableValues(schema, definitions, (variables ?? {}) as Record<string, unknown>, {
    maxErrors: MAX_VARIABLE_ERRORS,
    hideSuggestions,
  });
  if (!errors) return undefined;
  // New errors with our code and without graphql-js's originalError, which would be masked
  // as an unexpected error when a scalar threw anything but a GraphQLError.
  return {
    errors: errors.map((error) =>
      createGraphQLError(error.message, { nodes: error.nodes, extensions: { code: BAD_USER_INPUT } }),
    ),
  };
}
