// With GRAPHQL_INTROSPECTION off: schema introspection refused by validation
// (the introspection types are reachable only through `__schema` and `__type`;
// `__typename` stays), and "Did you mean …?" left out of validation errors, as
// it spells out field, argument and enum names.
import type { ASTVisitor, GraphQLError, ValidationContext } from 'graphql';
import { createGraphQLError } from 'graphql-yoga';

/**
 * The validation rule. (graphql's NoSchemaIntrospectionCustomRule does the same
 * by type, but under vitest this module's `graphql` may be another copy than
 * the schema's, and its type checks throw.)
 */
export function noIntrospectionRule(context: ValidationContext): ASTVisitor {
  return {
    Field(node) {
      const name = node.name.value;
      if (name !== '__schema' && name !== '__type') return;
      context.reportError(
        createGraphQLError(
          `GraphQL introspection has been disabled, but the requested query contained the field "${name}".`,
          { nodes: node },
        ),
      );
    },
  };
}

const SUGGESTION = /\s*Did you mean [^?]*\?/g;

/**
 * The errors without their suggestions (armor misses "Did you mean the enum value …?"; variable errors leave them out
 * themselves).
 */
export function withoutSuggestions(errors: readonly GraphQLError[]): readonly GraphQLError[] {
  for (const error of errors) {
    if (error.message.includes('Did you mean')) error.message = error.message.replace(SUGGESTION, '');
  }
  return errors;
}
