// Operation names as metric labels: names only (never the text), and at most
// MAX_NAMES distinct ones per process; the rest are counted as "other".
import { getOperationAST, type DocumentNode } from 'graphql';

const MAX_NAMES = 200;
const MAX_NAME_LENGTH = 64;

export interface OperationLabel {
  type: string;
  /** The name as a label value: capped, "anonymous" or "other". */
  name: string;
  /** The name as sent (for logs and spans), cut to MAX_NAME_LENGTH; undefined when anonymous. */
  raw: string | undefined;
}

export class OperationNames {
  readonly #known = new Set<string>();

  label(document: DocumentNode, operationName: string | null | undefined): OperationLabel {
    const operation = getOperationAST(document, operationName ?? undefined);
    if (!operation) return { type: 'unknown', name: 'unknown', raw: undefined };
    const name = operation.name?.value;
    return { type: operation.operation, name: name === undefined ? 'anonymous' : this.#cap(name), raw: name?.slice(0, MAX_NAME_LENGTH) };
  }

  #cap(name: string): string {
    if (this.#known.has(name)) return name;
    if (name.length > MAX_NAME_LENGTH || this.#known.size >= MAX_NAMES) return 'other';
    this.#known.add(name);
    return name;
  }
}
