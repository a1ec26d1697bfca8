// A field repeated in one selection set, refused before the standard rules run:
// graphql-js compares every pair of same-named fields, so 2,000 copies of one
// field cost tens of milliseconds of validation.
import { Kind, type DocumentNode, type FieldNode, type GraphQLError, type SelectionSetNode } from 'graphql';
import { createGraphQLError } from 'graphql-yoga';

/** The first field whose response key appears more than `limit` times in one selection set. */
function overRepeatedField(document: DocumentNode, limit: number): FieldNode | undefined {
  const inSet = (set: SelectionSetNode): FieldNode | undefined => {
    const counts = new Map<string, number>();
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) {
        const key = selection.alias?.value ?? selection.name.value;
        const count = (counts.get(key) ?? 0) + 1;
        if (count > limit) return selection;
        counts.set(key, count);
      }
      const inner = 'selectionSet' in selection && selection.selectionSet ? inSet(selection.selectionSet) : undefined;
      if (inner) return inner;
    }
    return undefined;
  };
  for (const definition of document.definitions) {
    const found = 'selectionSet' in definition ? inSet(definition.selectionSet) : undefined;
    if (found) return found;
  }
  return undefined;
}

/**
 * The refusal of a document that repeats a field more than `limit` times in one selection set; undefined when none
 * does.
 */
export function fieldRepeatRefusal(document: DocumentNode, limit: number): GraphQLError | undefined {
  const field = overRepeatedField(document, limit);
  if (!field) return undefined;
  const key = field.alias?.value ?? field.name.value;
  return createGraphQLError(`Field "${key}" is selected more than ${limit} times in one selection set.`, {
    nodes: field,
  });
}
