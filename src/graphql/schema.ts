// Imports every type file (for their side effects on the builder) and builds the schema.
import {
  isScalarType,
  Kind,
  valueFromASTUntyped,
  visit,
  BREAK,
  type GraphQLArgument,
  type GraphQLFieldResolver,
  type GraphQLSchema,
  type ValueNode,
} from 'graphql';
import { BadUserInputError } from '../errors.js';
import { builder } from './builder.js';
import type { GraphQLContext } from './context.js';
import './scalars.js';
import './enums.js';
import './errors.js';
import './objects.js';
import './delivery.js';
import './inputs.js';
import './quote.js';
import './booking.js';
import './cancellation.js';
import './availability.js';
import './events.js';
import './client-token.js';
import './merchant-keys.js';

/** The federation version the subgraph SDL links (`_service { sdl }`); Hive Gateway and Apollo Router both read it. */
export const FEDERATION_LINK = 'https://specs.apollo.dev/federation/v2.6';

/** The entity types _entities resolves; a representation of any other type is refused. */
const ENTITY_TYPES = new Set(['Delivery']);

let schema: GraphQLSchema | undefined;

/**
 * The schema every transport serves: the facade's own types, plus what makes it
 * a federation subgraph (`_service`, `_entities`, `_Any`, `_Entity`, `_Service`;
 * see docs/federation.md).
 */
export function toSchema(): GraphQLSchema {
  schema ??= bounded(builder.toSubGraphSchema({ linkUrl: FEDERATION_LINK }));
  return schema;
}

/**
 * _entities as every other read: a key first (UNAUTHENTICATED), at most
 * MAX_BATCH_SIZE representations (as `deliveries`), Delivery representations
 * only (BAD_USER_INPUT instead of the library's "Unexpected error."), and the
 * federation types described. The types are the copies toSubGraphSchema made
 * when it sorted the schema, so @apollo/subgraph's own are left as they are.
 */
function bounded(subgraph: GraphQLSchema): GraphQLSchema {
  const fields = subgraph.getQueryType()!.getFields();
  const entities = fields._entities!;
  const service = fields._service!;
  type EntitiesResolver = GraphQLFieldResolver<unknown, GraphQLContext, { representations: unknown[] }>;
  const resolveEntities = entities.resolve as EntitiesResolver;
  entities.description =
    'Federation: the entities a gateway refers to, one entry per representation, in order; null where not found. Every representation of one uid is one upstream read; at most MAX_BATCH_SIZE (100 by default), and the selection counts once per representation towards the operation cost limit. Needs the merchant key as every read.';
  (entities.args[0] as GraphQLArgument).description =
    'Entity representations: `{ __typename: "Delivery", uid }`, or with `group` (PLATFORM or PARTNER) when known.';
  const resolveBounded: EntitiesResolver = (root, args, ctx, info) => {
    ctx.requireKey();
    const { representations } = args;
    const max = ctx.services.config.graphql.maxBatchSize;
    if (representations.length > max)
      throw new BadUserInputError(`_entities takes at most ${max} representations; got ${representations.length}.`);
    representations.forEach((representation, index) => {
      const typename =
        typeof representation === 'object' && representation !== null
          ? (representation as { __typename?: unknown }).__typename
          : undefined;
      // Not echoed: a representation is whatever the client sent.
      if (typeof typename !== 'string' || !ENTITY_TYPES.has(typename))
        throw new BadUserInputError(
          `Representation ${index} is not one of a Delivery ({ __typename: "Delivery", uid }).`,
        );
    });
    const entries = resolveEntities(root, args, ctx, info) as unknown[];
    // The whole list is awaited here, each failure kept as its entry's Error, as in
    // `deliveries`: graphql-jit appends an extra entry when an item's promise
    // rejects after a later item resolved, so items must not be pending promises.
    return Promise.all(
      entries.map((entry) =>
        Promise.resolve(entry).catch((error: unknown) => (error instanceof Error ? error : new Error(String(error)))),
      ),
    );
  };
  entities.resolve = resolveBounded as typeof entities.resolve;
  service.description =
    "Federation: this subgraph's SDL with its federation directives (`@key` on Delivery), for composing a supergraph. Open without a key; in production only with FEDERATION_SDL=true (or introspection on), else refused by validation (docs/federation.md).";
  const describe: Record<string, string> = {
    _Any: 'Federation: an entity representation, any JSON object with `__typename` and the key fields.',
    _Entity: 'Federation: every type that _entities resolves (Delivery).',
    _Service: 'Federation: what a gateway reads about this subgraph.',
    link__Import: 'Federation: a name imported by the `@link` directive of the subgraph SDL.',
  };
  for (const [name, description] of Object.entries(describe)) {
    const type = subgraph.getType(name);
    if (type) type.description = description;
  }
  const any = subgraph.getType('_Any');
  // graphql-jit parses literals without the operation's variables (and says so on
  // stderr for a parser that takes them): a representation written inline must be
  // all literal, and one with a variable in it is refused by validation, clearly,
  // instead of reaching the resolver with holes. Gateways send them as variables.
  if (isScalarType(any))
    any.parseLiteral = (node: ValueNode) => {
      if (holdsVariable(node))
        throw new TypeError(
          'A representation written in the operation cannot hold variables; pass the whole list as a variable.',
        );
      return valueFromASTUntyped(node);
    };
  return subgraph;
}

function holdsVariable(node: ValueNode): boolean {
  let found = false;
  visit(node, {
    [Kind.VARIABLE]: () => {
      found = true;
      return BREAK;
    },
  });
  return found;
}
