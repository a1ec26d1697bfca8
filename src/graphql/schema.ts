// Imports every type file (for their side effects on the builder) and builds the schema.
import type { GraphQLSchema } from 'graphql';
import { builder } from './builder.js';
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

let schema: GraphQLSchema | undefined;

export function toSchema(): GraphQLSchema {
  schema ??= builder.toSchema();
  return schema;
}
