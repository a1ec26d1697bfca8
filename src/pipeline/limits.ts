// The limits every operation is held to, and how a refusal is written. The
// guards beside this file each judge one of them against an operation plan.
import type { GraphQLError } from 'graphql';
import { createGraphQLError } from 'graphql-yoga';
import type { DeliveryGraphError } from '../errors.js';

/**
 * Limits on one operation. The largest operations of the tests and the README
 * (a 100-uid batch of full deliveries, a full page of 500 events, the tracking
 * page's read) stay well inside them; many reads go in one `deliveries(uids:)`
 * list, not in aliases.
 */
export const OPERATION_LIMITS = {
  /** Nested selection levels (introspection's own nesting is not counted; it is off in production). */
  depth: 12,
  aliases: 30,
  /** Lexical tokens of the whole document, checked while parsing. */
  tokens: 2000,
  directives: 20,
  /**
   * The most field values one answer may hold (operationCost): every field counts
   * 1, `deliveries(uids:)` counts its selection once per uid (and federation's
   * `_entities(representations:)` once per representation, by the same rule: a
   * list field with a list argument) and `Delivery.events` its edges once per
   * event of the page. A 100-uid batch of full deliveries costs
   * about 8,600, a full page of 500 events with every field about 8,000; 30
   * aliases of 100 uids × a page of events cost six million.
   */
  cost: 50_000,
  /** Events in one page of `Delivery.events` when `first` is omitted (MAX_PAGE in graphql/events.ts). */
  eventsPage: 500,
  /** Times one response key may appear in one selection set. */
  fieldRepeats: 10,
} as const;

/** A typed error of ours as a GraphQL error with its stable code (and, for HTTP, `extensions.http`). */
export function toGraphQLError(error: DeliveryGraphError, extensions: Record<string, unknown> = {}): GraphQLError {
  return createGraphQLError(error.message, { extensions: { code: error.code, ...extensions } });
}
