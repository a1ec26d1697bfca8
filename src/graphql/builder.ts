// The Pothos builder and its plugins; no types are defined here.
import SchemaBuilder from '@pothos/core';
import DirectivesPlugin from '@pothos/plugin-directives';
import ErrorsPlugin from '@pothos/plugin-errors';
import FederationPlugin from '@pothos/plugin-federation';
import RelayPlugin from '@pothos/plugin-relay';
import type { GraphQLContext } from './context.js';

export const builder = new SchemaBuilder<{
  Context: GraphQLContext;
  // Fields are non-null unless they say otherwise, as the target schema reads.
  DefaultFieldNullability: false;
  Scalars: {
    DateTime: { Input: string; Output: string };
    Date: { Input: string; Output: string };
    Decimal: { Input: string; Output: string };
    JSON: { Input: object | null; Output: unknown };
    ID: { Input: string; Output: string };
  };
}>({
  // Errors first, so errors thrown while loading are caught into result unions too;
  // federation last (after anything that wraps resolvers), as its plugin asks: it
  // makes Delivery an entity of a supergraph (docs/federation.md).
  plugins: [ErrorsPlugin, RelayPlugin, DirectivesPlugin, FederationPlugin],
  defaultFieldNullability: false,
  errors: { defaultTypes: [] },
  relay: {
    clientMutationId: 'omit',
    cursorType: 'String',
    nodesQueryOptions: false,
    nodeQueryOptions: {
      description: 'Refetches any object that implements Node by its global id.',
      args: { id: { description: 'The global id, as read from an `id` field.' } },
    },
    hasNextPageFieldOptions: { description: 'True when more items follow this page.' },
    hasPreviousPageFieldOptions: { description: 'True when items precede this page.' },
    startCursorFieldOptions: { description: 'Cursor of the first item of this page.' },
    endCursorFieldOptions: {
      description: 'Cursor of the last item of this page; pass it as `after` for the next page.',
    },
    nodeTypeOptions: {
      description: 'An object with a stable, opaque global id that `node(id:)` refetches.',
    },
    pageInfoTypeOptions: {
      description: 'Where a page of a connection sits in the whole list.',
    },
    cursorFieldOptions: { description: "The item's cursor; pass it as `after` to read on from here." },
    pageInfoFieldOptions: { description: 'Where this page sits in the whole list.' },
    idFieldOptions: {
      description: 'Opaque global id (Relay); pass it to `node(id:)` to refetch this object.',
    },
  },
});

builder.queryType({ description: 'Reads: deliveries on either endpoint group, and the availability of both.' });
builder.mutationType({ description: 'Quotes, bookings and cancellations, proxied to the chosen endpoint group.' });
