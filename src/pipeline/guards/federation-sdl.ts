// The FEDERATION_SDL switch. `_service { sdl }` is the whole schema, every type,
// field, argument and description: what turning introspection off hides. When the
// switch is off, `_service` is refused by validation on every transport, as
// `__schema` is (docs/federation.md says when a gateway needs it on).
import type { ASTVisitor, ValidationContext } from 'graphql';
import { createGraphQLError } from 'graphql-yoga';

/** The validation rule refusing Query._service (aliased or in a fragment alike); `_entities` stays. */
export function noFederationSdlRule(context: ValidationContext): ASTVisitor {
  return {
    Field(node) {
      if (node.name.value !== '_service') return;
      // By name, not by type identity: under vitest graphql may be loaded twice (see guards/introspection.ts).
      if (context.getParentType()?.name !== context.getSchema().getQueryType()?.name) return;
      context.reportError(
        createGraphQLError(
          'The federation SDL has been disabled, but the requested query contained the field "_service".',
          { nodes: node },
        ),
      );
    },
  };
}
