// Counts the executions of subscription events, where graphql-js runs them:
// the subscription root field's resolver runs once each time an event is
// executed into a message. The schema is one object for every app in a process,
// so each count is of one app's executions (told apart by the context's services).
import type { GraphQLFieldResolver } from 'graphql';
import type { App } from '../../src/app.js';

export interface ExecutionCount {
  /** Executions by root field (deliveryEvents, deliveryUpdated, courierLocation) since the count started. */
  counts: Record<string, number>;
  /** Puts the resolvers back. */
  restore(): void;
}

export function countExecutions(app: App): ExecutionCount {
  const fields = app.pipeline.documents.schema.getSubscriptionType()!.getFields();
  const counts: Record<string, number> = {};
  const restores: Array<() => void> = [];
  for (const name of ['deliveryEvents', 'deliveryUpdated', 'courierLocation']) {
    const field = fields[name]!;
    const resolve = field.resolve as GraphQLFieldResolver<unknown, { services?: unknown }>;
    counts[name] = 0;
    field.resolve = (source, args, context, info) => {
      if (context?.services === app.services) counts[name]! += 1;
      return resolve(source, args, context, info);
    };
    restores.push(() => (field.resolve = resolve));
  }
  return { counts, restore: () => restores.reverse().forEach((restore) => restore()) };
}
