// What a client token may do, as a plain rule over an operation's kind and root
// fields: read its own deliveries and follow their events. The pipeline judges
// each operation plan by it before anything runs; the resolvers hold their own
// line too (a mutation asks for the merchant key itself, see GraphQLContext).
import { ForbiddenError } from '../errors.js';

/** Root fields a client token may select, by operation type. Introspection stays as GRAPHQL_INTROSPECTION says. */
const ALLOWED_ROOT_FIELDS: Readonly<Record<'query' | 'subscription', ReadonlySet<string>>> = {
  query: new Set(['delivery', 'deliveries', 'node', 'clientToken', '_entities', '__typename', '__schema', '__type']),
  subscription: new Set(['deliveryUpdated', 'courierLocation', 'deliveryEvents', '__typename']),
};

export type OperationKind = 'query' | 'mutation' | 'subscription';

/** Why a client token may not run an operation of this kind selecting these root fields; undefined when it may. */
export function clientTokenRefusal(kind: OperationKind, rootFields: ReadonlySet<string>): ForbiddenError | undefined {
  if (kind === 'mutation')
    return new ForbiddenError('A client token may only read its deliveries; mutations need the merchant key.');
  const allowed = ALLOWED_ROOT_FIELDS[kind];
  const others = [...rootFields].filter((name) => !allowed.has(name));
  if (others.length === 0) return undefined;
  return new ForbiddenError(
    `A client token may not use ${others.map((name) => `${kind === 'query' ? 'Query' : 'Subscription'}.${name}`).join(', ')}; it reads its own deliveries only.`,
  );
}

/** Said when a merchant-only field is asked for with a client token (the resolvers' own check). */
export const MERCHANT_ONLY = 'This needs the merchant key; a client token may only read its own deliveries.';
